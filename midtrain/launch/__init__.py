"""midtrain.launch"""
