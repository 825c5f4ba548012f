"""Fill the sbatch templates in slurm/ (``{{ name }}`` placeholders) and assemble their common parts.

A template holds the script a cluster engineer would write by hand; the values put into it are already
checked and quoted snippets (see :mod:`midtrain.launch.shell`). A placeholder without a value, or a value
without a placeholder, is an error, so templates and code cannot drift apart silently.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from midtrain.launch.shell import LaunchError, check_bash, directive, exports, q
from midtrain.launch.site import JobResources, SiteConfig

_PLACEHOLDER = re.compile(r"{{\s*([A-Za-z_][A-Za-z0-9_]*)\s*}}")


def templates_dir() -> Path:
    """slurm/ at the root of the midtrain checkout."""
    return Path(__file__).resolve().parents[2] / "slurm"


def fill(template: str, values: dict[str, str]) -> str:
    """slurm/TEMPLATE (a whole script or a fragment such as launch.sh) with every placeholder filled."""
    path = templates_dir() / template
    if not path.is_file():
        raise LaunchError(f"template {path} does not exist")
    text = path.read_text()
    wanted = set(_PLACEHOLDER.findall(text))
    missing = wanted - set(values)
    extra = set(values) - wanted
    if missing or extra:
        raise LaunchError(f"template {template}: missing values {sorted(missing)}, unused values {sorted(extra)}")
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)


def render(template: str, values: dict[str, str], what: str | None = None) -> str:
    """Fill slurm/TEMPLATE and check the result with ``bash -n``."""
    out = fill(template, values)
    check_bash(out, what or template)
    return out


def job_body(
    site: SiteConfig, res: JobResources, *, argv: str, log_file: str, status_dir: str, mounts: list[str]
) -> dict[str, str]:
    """The values train.sbatch and step.sbatch share: Python setup, environment, and the launch fragment
    (slurm/launch.sh). ``log_file`` is the per-restart log (``DIR/NAME-<job>_<restart>.out`` is written);
    ``mounts`` are the directories the job reads or writes (mounted into a container when none covers them)."""
    log_dir, log_name = log_file.rsplit("/", 1)
    launch = fill(
        "launch.sh",
        {
            "log_dir": q(log_dir, "log dir"),
            "log_name": directive(log_name, "log name"),
            "ranks_per_node": str(res.ranks_per_node),
            "status_dir": q(status_dir, "status dir"),
            "signal_before_s": str(int(site.signal_before_s)),
            "cpus_per_task": str(res.cpus_per_task),
            "srun_container": srun_container_args(site, mounts),
            "argv": argv,
            "max_requeues": str(site.max_requeues),
            "max_retries": str(site.max_retries),
            "hang_timeout_s": str(site.hang_timeout_s),
            "hang_poll_s": str(max(1, min(60, site.hang_timeout_s // 10))),
        },
    )
    return {
        "python_setup": python_setup(site),
        "master_port_base": str(site.master_port_base),
        "master_port_span": str(site.master_port_span()),
        "job_env": fill("env_gpu.sh" if res.gpus_per_node > 0 else "env_cpu.sh", {}).rstrip("\n"),
        "site_env": site_exports(site),
        "launch": launch.rstrip("\n"),
    }


def check_cpus(site: SiteConfig, res: JobResources, what: str) -> None:
    """cpus_per_task x ranks per node must fit the node (sbatch rejects the job otherwise, after the queue)."""
    if site.cpus_per_node is None:
        return
    need = res.cpus_per_task * res.ranks_per_node
    if need > site.cpus_per_node:
        raise LaunchError(
            f"{what}: cpus_per_task {res.cpus_per_task} x {res.ranks_per_node} ranks per node = "
            f"{need} CPUs, more than the site's cpus_per_node {site.cpus_per_node}; lower "
            f"cpus_per_task to {site.cpus_per_node // res.ranks_per_node} or less"
        )


def sbatch_lines(
    site: SiteConfig, res: JobResources, *, job_name: str, log_file: str, gpu: bool, requeue: bool = True
) -> str:
    """The ``#SBATCH`` block: allocation from ``res``, placement from ``site``. A job takes whole nodes when
    its resources say ``exclusive: true``; left unset, GPU jobs do unless the site says ``exclusive: false``."""
    lines: list[tuple[str, str | None]] = [("job-name", directive(job_name, "job name")), ("nodes", str(res.nodes))]
    if gpu:
        lines += [("ntasks-per-node", str(res.ranks_per_node)), ("gpus-per-node", str(res.gpus_per_node))]
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
    exclusive = res.exclusive if res.exclusive is not None else gpu and site.exclusive
    if exclusive and "--exclusive" not in site.sbatch_args:
        lines.append(("exclusive", None))
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


def covered(path: str, mounts: list[str]) -> bool:
    """Whether a mount (SRC:DST[:FLAGS]) shows PATH inside the container at the same path."""
    for m in mounts:
        src, _, rest = m.partition(":")
        dst = rest.split(":", 1)[0] or src
        if path == src or path.startswith(src.rstrip("/") + "/"):
            if dst != src:
                raise LaunchError(
                    f"container_mounts: {m!r} maps {src} to {dst}, but the job passes host paths "
                    f"({path}); mount it at the same path ({src}:{src})"
                )
            return True
    return False


def container_mounts(site: SiteConfig, paths: list[str]) -> list[str]:
    """The site's mounts, plus PATH:PATH for each directory the job uses that none of them covers."""
    mounts = list(site.container_mounts)
    for path in [site.job_workdir(), *paths]:
        path = str(path).rstrip("/") or "/"
        if "," in path or ":" in path:
            raise LaunchError(
                f"container mount {path!r}: pyxis splits --container-mounts on ',' and ':'; use a path without them"
            )
        if not covered(path, mounts):
            mounts.append(f"{path}:{path}")
    return mounts


def check_mounted(site: SiteConfig, paths: dict[str, str], mounts: list[str]) -> None:
    """With a container image the ranks see only what is mounted: refuse a path they read (``paths``: the
    field it comes from -> the path) that neither the site's mounts nor the job's own (``mounts``: its
    run or output directory, the workdir is added) cover, naming the field and the mounts."""
    if not site.container_image:
        return
    seen = container_mounts(site, mounts)
    for what, path in paths.items():
        p = os.path.abspath(str(site.job_path(path)))
        if not covered(p, seen):
            raise LaunchError(
                f"{what}: {p} is not under any directory mounted into the container ({', '.join(seen)}); "
                "the job would not find it there. Add a container_mounts entry covering it (e.g. /lustre:/lustre) "
                "or move it under one"
            )


def srun_container_args(site: SiteConfig, paths: list[str] | None = None) -> str:
    """pyxis/enroot flags for srun: the image, mounts (the workdir and ``paths`` included), the checkout as
    working directory and $HOME left out. The container is unnamed: pyxis removes it when the step ends (a
    named one stays unpacked on every node it ran on, job after job, with container_scope=global)."""
    if not site.container_image:
        return ""
    args = [
        f"--container-image={q(site.container_image, 'container_image')}",
        f"--container-mounts={q(','.join(container_mounts(site, paths or [])), 'container_mounts')}",
        f"--container-workdir={q(site.job_workdir(), 'workdir')}",
    ]
    if not site.container_mount_home:
        args.append("--no-container-mount-home")
    return " ".join(args) + " "


def site_exports(site: SiteConfig) -> str:
    return exports(site.env, "env") if site.env else "# (no site env)"
