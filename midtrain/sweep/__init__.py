"""Ablation sweeps: variants of a mixture and pack/train recipe, each midtrained from the same start with the
same token budget and seed, then judged by the fixed SFT probe and the proxy evals, ranked in one report."""
