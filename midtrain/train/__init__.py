"""midtrain.train: model provider, portable attention, CPU mode, loop, checkpoints (megatron-core)."""

import warnings

# megatron-core announces at import that it falls back from Apex/TE kernels; on CPU that is the expected
# path, and the trainer logs which layer implementation it uses, so keep the console readable.
warnings.filterwarnings("ignore", message=r".*(Apex|Transformer Engine).*not installed", category=UserWarning)
warnings.filterwarnings("ignore", message=r".*full scope is deprecated", category=UserWarning)
