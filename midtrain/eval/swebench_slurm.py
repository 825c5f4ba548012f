"""The Slurm side of a SWE-bench run: swebench.sbatch, run.sh as one job on the site's allocation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from midtrain.config import ConfigError
from midtrain.eval.config import SweBenchConfig
from midtrain.eval.swebench_scripts import sh
from midtrain.eval.swebench_stamp import GENERATED, RUN_WANT
from midtrain.launch.render import python_setup, sbatch_lines, site_exports
from midtrain.launch.site import load_site


def write_sbatch(cfg: SweBenchConfig, out: Path, files: dict[str, Path], site: Any = None) -> dict[str, Path]:
    """swebench.sbatch: run.sh as one Slurm job, its allocation from the site config's protocol step
    ``eval_swebench`` (partition, account, qos, time, CPUs, memory), its Python from the site's venv."""
    site = site or load_site()
    res = site.step_resources("eval_swebench")
    if res.gpus_per_node < cfg.tensor_parallel:
        raise ConfigError(
            f"tensor_parallel={cfg.tensor_parallel}: the site's eval_swebench job has "
            f"{res.gpus_per_node} GPUs per node (site protocol.eval_swebench.gpus_per_node)"
        )
    sbatch = (
        "\n".join(
            [
                "#!/bin/bash",
                sbatch_lines(
                    site,
                    res,
                    job_name=f"swebench-{cfg.served_model_name}",
                    log_file=f"{out}/slurm-%j.out",
                    gpu=True,
                    requeue=False,
                ),
                python_setup(site),
                site_exports(site),
                f"bash {sh(str(out / 'run.sh'))}",
            ]
        )
        + "\n"
    )
    (out / "swebench.sbatch").write_text(sbatch)
    files["sbatch"] = out / "swebench.sbatch"
    (out / "swebench_config.yaml").write_text(cfg.to_yaml())
    made = [out / "swebench_config.yaml", out / GENERATED, *files.values()]
    made += [out / RUN_WANT] if (out / RUN_WANT).exists() else []
    (out / GENERATED).write_text(json.dumps(sorted({str(f.relative_to(out)) for f in made}), indent=1))
    return files
