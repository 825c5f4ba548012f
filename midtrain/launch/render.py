"""Fill the sbatch templates in slurm/ (``{{ name }}`` placeholders) and assemble their common parts.

A template holds the script a cluster engineer would write by hand; the values put into it are already
checked and quoted snippets (see :mod:`midtrain.launch.shell`). A placeholder without a value, or a value
without a placeholder, is an error, so templates and code cannot drift apart silently.
"""

from __future__ import annotations

import re
from pathlib import Path

from midtrain.launch.shell import LaunchError, check_bash, directive, exports, q
from midtrain.launch.site import JobResources, SiteConfig

_PLACEHOLDER = re.compile(r"{{\s*([A-Za-z_][A-Za-z0-9_]*)\s*}}")


def templates_dir() -> Path:
    """slurm/ at the root of the midtrain checkout."""
    return Path(__file__).resolve().parents[2] / "slurm"


def render(template: str, values: dict[str, str], what: str | None = None) -> str:
    """Fill slurm/TEMPLATE and check the result with ``bash -n``."""
    path = templates_dir() / template
    if not path.is_file():
        raise LaunchError(f"template {path} does not exist")
    text = path.read_text()
    wanted = set(_PLACEHOLDER.findall(text))
    missing = wanted - set(values)
    extra = set(values) - wanted
    if missing or extra:
        raise LaunchError(f"template {template}: missing values {sorted(missing)}, unused values {sorted(extra)}")
    out = _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)
    check_bash(out, what or template)
    return out


def sbatch_lines(site: SiteConfig, res: JobResources, *, job_name: str, log_file: str,
                 gpu: bool, requeue: bool) -> str:
    """The ``#SBATCH`` block: allocation from ``res``, placement from ``site``."""
    lines = [("job-name", directive(job_name, "job name")),
             ("nodes", str(res.nodes))]
    if gpu:
        lines += [("ntasks-per-node", str(res.ranks_per_node)),
                  ("gpus-per-node", str(res.gpus_per_node))]
    else:
        lines += [("ntasks-per-node", str(res.ranks_per_node))]
    lines += [("cpus-per-task", str(res.cpus_per_task))]
    if res.mem is not None:
        lines.append(("mem", directive(res.mem, "mem")))
    lines.append(("time", directive(res.time, "time")))
    partition = res.partition or site.partition
    for key, value in (("partition", partition), ("account", site.account), ("qos", site.qos)):
        if value:
            lines.append((key, directive(value, key)))
    lines += [("output", directive(log_file, "log file")), ("open-mode", "append")]
    if requeue:
        # B: only the batch shell gets it; the script forwards it to the ranks (see the train templates)
        lines += [("requeue", None), ("signal", f"B:USR1@{int(site.signal_before_s)}")]
    out = [f"#SBATCH --{k}={v}" if v is not None else f"#SBATCH --{k}" for k, v in lines]
    for i, extra in enumerate(site.sbatch_args):
        out.append(f"#SBATCH {directive(extra, f'sbatch_args[{i}]')}")
    return "\n".join(out)


def python_setup(site: SiteConfig) -> str:
    """Lines that put the job in the checkout with midtrain's Python (venv; a container brings its own)."""
    lines = [f"cd {q(site.job_workdir(), 'workdir')}"]
    venv = site.python_env()
    if venv:
        lines.append(f"source {q(str(Path(venv) / 'bin' / 'activate'), 'venv')}")
    return "\n".join(lines)


def srun_container_args(site: SiteConfig) -> str:
    """pyxis/enroot flags for srun: the image, mounts, and the checkout as working directory."""
    if not site.container_image:
        return ""
    args = [f"--container-image={q(site.container_image, 'container_image')}"]
    mounts = ",".join(site.container_mounts)
    if mounts:
        args.append(f"--container-mounts={q(mounts, 'container_mounts')}")
    args.append(f"--container-workdir={q(site.job_workdir(), 'workdir')}")
    return " ".join(args) + " "


def site_exports(site: SiteConfig) -> str:
    return exports(site.env, "env") if site.env else "# (no site env)"
