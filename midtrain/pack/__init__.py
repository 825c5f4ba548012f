"""midtrain.pack"""
