"""midtrain.sources"""
