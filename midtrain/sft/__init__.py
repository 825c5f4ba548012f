"""midtrain.sft"""
