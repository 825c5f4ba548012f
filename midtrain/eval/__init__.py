"""midtrain.eval"""
