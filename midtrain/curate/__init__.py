"""midtrain.curate"""
