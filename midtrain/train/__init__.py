"""midtrain.train"""
