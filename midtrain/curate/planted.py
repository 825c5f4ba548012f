"""A planted-secret corpus for measuring redaction: real code with generated secrets, and real clean code.

Planted documents are real source files (the Python standard library, this environment's site-packages)
with secrets generated in the shapes real ones have and written in the contexts they leak from: code
assignments, .env lines, YAML/JSON config, connection URLs, diff lines, CI build-log lines, HTTP headers in
agent traces, PEM blocks (plain, escaped in a string, inside a diff). The clean corpus is real files
with nothing planted. :func:`measure` gives recall per secret kind (a secret counts as caught when its
value no longer occurs in the redacted text), the share of clean files changed, and checks that line
counts and diff prefixes survive. Used by tests/test_curate_redact.py and bench/bench_curate.py.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import random
import string
import sysconfig
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ALNUM = string.ascii_letters + string.digits


def _r(rng: random.Random, n: int, chars: str = ALNUM) -> str:
    return "".join(rng.choice(chars) for _ in range(n))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _password(rng: random.Random) -> str:
    style = rng.randrange(3)
    if style == 0:  # random printable
        return _r(rng, rng.randint(10, 20), ALNUM + "!#%&*+-?^_~")
    if style == 1:  # word + digits + symbol
        word = rng.choice(["Summer", "Winter", "Dragon", "Monkey", "Sunshine", "Football", "Princess", "Welcome"])
        return f"{word}{rng.randint(10, 9999)}{rng.choice('!@#$%&*')}"
    return _r(rng, rng.randint(16, 24))


def _global_ip(rng: random.Random) -> str:
    while True:
        ip = ipaddress.IPv4Address(rng.getrandbits(32))
        if ip.is_global and not ip.is_multicast and sum(1 for p in str(ip).split(".") if len(p) > 1) >= 2:
            return str(ip)


def _pem(rng: random.Random) -> tuple[list[str], list[str]]:
    kind = rng.choice(["RSA ", "EC ", "OPENSSH ", ""])
    body = [_r(rng, 64, ALNUM + "+/") for _ in range(rng.randint(4, 12))]
    body += [_r(rng, rng.randint(8, 60), ALNUM + "+/") + "=="]
    return [f"-----BEGIN {kind}PRIVATE KEY-----", *body, f"-----END {kind}PRIVATE KEY-----"], body


# kind -> value generator
GENERATORS = {
    "aws_access_key": lambda r: "AKIA" + _r(r, 16, string.ascii_uppercase + string.digits),
    "aws_secret_key": lambda r: _r(r, 40, ALNUM + "/+"),
    "github_token": lambda r: r.choice(["ghp_", "gho_", "ghs_"]) + _r(r, 36),
    "github_pat": lambda r: "github_pat_" + _r(r, 22) + "_" + _r(r, 59),
    "gitlab_token": lambda r: "glpat-" + _r(r, 20, ALNUM + "-_"),
    "slack_token": lambda r: f"xoxb-{_r(r, 11, string.digits)}-{_r(r, 13, string.digits)}-{_r(r, 24)}",
    "slack_webhook": lambda r: (
        f"https://hooks.slack.com/services/T{_r(r, 8, string.ascii_uppercase + string.digits)}"
        f"/B{_r(r, 8, string.ascii_uppercase + string.digits)}/{_r(r, 24)}"
    ),
    "google_api_key": lambda r: "AIza" + _r(r, 35, ALNUM + "-_"),
    "stripe_key": lambda r: "sk_live_" + _r(r, 24),
    "openai_key": lambda r: "sk-proj-" + _r(r, 48, ALNUM + "-_"),
    "huggingface_token": lambda r: "hf_" + _r(r, 34, string.ascii_letters),
    "npm_token": lambda r: "npm_" + _r(r, 36),
    "sendgrid_key": lambda r: f"SG.{_r(r, 22, ALNUM + '-_')}.{_r(r, 43, ALNUM + '-_')}",
    "jwt": lambda r: ".".join(
        [
            _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()),
            _b64url(json.dumps({"sub": _r(r, 8), "iat": r.randint(1e9, 2e9)}).encode()),
            _b64url(r.randbytes(32)),
        ]
    ),
    "password": _password,
    "url_password": lambda r: _password(r).replace("@", "%40"),  # an unescaped '@' would end the userinfo
    "generic_secret": lambda r: r.choice(
        [_r(r, 32, "0123456789abcdef"), _r(r, 40), _r(r, 50, ALNUM + "!@#%^&*(-_=+)")]
    ),
    "email": lambda r: (
        f"{r.choice(['john', 'maria', 'wei', 'aisha', 'lars', 'priya'])}."
        f"{r.choice(['smith', 'garcia', 'chen', 'khan', 'berg', 'patel'])}{r.randint(1, 99)}@"
        f"{r.choice(['acme-corp', 'globex', 'initech', 'umbrella-labs', 'hooli'])}."
        f"{r.choice(['com', 'io', 'de', 'co.uk', 'net'])}"
    ),
    "ip_address": _global_ip,
}

# kind -> contexts; {v} is the value. Lines only: planting never splits an existing line.
CONTEXTS = {
    "aws_access_key": [
        'AWS_ACCESS_KEY_ID = "{v}"',
        "export AWS_ACCESS_KEY_ID={v}",
        "aws_access_key_id: {v}",
        "[INFO] using credentials {v} for s3 upload",
    ],
    "aws_secret_key": ['aws_secret_access_key = "{v}"', "AWS_SECRET_ACCESS_KEY={v}", '    "SecretAccessKey": "{v}",'],
    "github_token": [
        'GITHUB_TOKEN = "{v}"',
        "git clone https://{v}@github.com/acme/private.git",
        "  token: {v}",
        "Authorization: token {v}",
    ],
    "github_pat": ['headers = {{"Authorization": "Bearer {v}"}}', "export GH_TOKEN={v}"],
    "gitlab_token": ['gitlab_token = "{v}"', "PRIVATE-TOKEN: {v}"],
    "slack_token": ['SLACK_BOT_TOKEN = "{v}"', "slack_token: {v}", "client = WebClient(token='{v}')"],
    "slack_webhook": ['WEBHOOK_URL = "{v}"', "curl -X POST -d @payload.json {v}"],
    "google_api_key": ['GOOGLE_API_KEY = "{v}"', "maps.googleapis.com/maps/api/js?key={v}&callback=init"],
    "stripe_key": ['stripe.api_key = "{v}"', "STRIPE_SECRET_KEY={v}"],
    "openai_key": ['client = OpenAI(api_key="{v}")', "OPENAI_API_KEY={v}"],
    "huggingface_token": ['login(token="{v}")', "HF_TOKEN={v}"],
    "npm_token": ["//registry.npmjs.org/:_authToken={v}", "NPM_TOKEN={v}"],
    "sendgrid_key": ['SENDGRID_API_KEY = "{v}"'],
    "jwt": ['session_cookie = "{v}"', "Authorization: Bearer {v}", "  id_token: {v}"],
    "password": [
        'password = "{v}"',
        "DB_PASSWORD={v}",
        '    "password": "{v}",',
        "  password: {v}",
        "mysql_root_password='{v}'",
        "db.connect(host, user='app', passwd='{v}')",
        "--password={v}",
    ],
    "url_password": [
        'DATABASE_URL = "postgres://app:{v}@db.prod.example-internal.net:5432/main"',
        "redis://default:{v}@cache-01.internal:6379/0",
        "amqp://worker:{v}@rabbit:5672//",
    ],
    "generic_secret": [
        'SECRET_KEY = "{v}"',
        "client_secret: {v}",
        'auth_token = "{v}"',
        '"api_key": "{v}",',
        "APP_SIGNING_KEY={v}",
    ],
    "email": [
        "# Maintainer: Jane Roe <{v}>",
        'SUPPORT_EMAIL = "{v}"',
        "Signed-off-by: Dev <{v}>",
        "notify: {v}",
        "{v} (maintainer)",
    ],
    "ip_address": [
        "[2024-03-01 10:22:13] INFO accepted connection from {v}:52344",
        'SERVER_HOST = "{v}"',
        "ssh deploy@{v} 'systemctl restart app'",
        '{v} - - [01/Mar/2024:10:22:13 +0000] "GET /api/v1/health HTTP/1.1" 200 17',
    ],
}
KINDS = sorted(CONTEXTS) + ["private_key"]


@dataclass
class PlantedDoc:
    text: str
    secrets: list[tuple[str, str]]  # (kind, value that must not survive)
    style: str  # code | diff | log
    origin: str = ""


@dataclass
class RedactionReport:
    planted: int = 0
    caught: int = 0
    per_kind: dict = field(default_factory=dict)  # kind -> [caught, planted]
    missed: list = field(default_factory=list)  # (kind, context line)
    clean_files: int = 0
    clean_changed_secrets: int = 0  # clean files changed by secret detectors (false positives)
    clean_changed_any: int = 0  # ... by any detector (e-mails and IPs in real files are true PII)
    clean_changed_by_kind: dict = field(default_factory=dict)
    false_positive_examples: list = field(default_factory=list)
    structure_errors: int = 0

    @property
    def recall(self) -> float:
        return self.caught / max(1, self.planted)

    @property
    def fp_rate(self) -> float:
        return self.clean_changed_secrets / max(1, self.clean_files)

    @property
    def any_change_rate(self) -> float:
        return self.clean_changed_any / max(1, self.clean_files)


def real_code_files(n: int, seed: int = 0, max_bytes: int = 200_000) -> list[Path]:
    """``n`` .py files: half from the standard library, half from this environment's site-packages."""
    rng = random.Random(seed)
    out: list[Path] = []
    for key in ("stdlib", "purelib"):
        root = Path(sysconfig.get_paths()[key])
        files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts or key == "purelib")
        files = [p for p in files if 200 < p.stat().st_size <= max_bytes]
        out += rng.sample(files, min(len(files), n // 2))
    return out


def read_texts(paths: list[Path]) -> list[tuple[str, str]]:
    out = []
    for p in paths:
        try:
            out.append((str(p), p.read_text(encoding="utf-8")))
        except (UnicodeDecodeError, OSError):
            continue
    return out


def plant(texts: list[tuple[str, str]], per_doc: int = 3, seed: int = 0) -> list[PlantedDoc]:
    """One planted document per input text, styled round-robin as code, a diff or a build log."""
    rng = random.Random(seed)
    docs = []
    for i, (origin, text) in enumerate(texts):
        style = ("code", "diff", "log")[i % 3]
        lines = text.splitlines()[:400] or [""]
        secrets: list[tuple[str, str]] = []
        inserts: list[list[str]] = []
        for _ in range(per_doc):
            kind = KINDS[rng.randrange(len(KINDS))]
            if kind == "private_key":
                block, key_lines = _pem(rng)
                form = rng.randrange(2)
                if form == 1:  # escaped inside a string literal
                    block = ['KEY = "' + "\\n".join(block) + '\\n"']
                inserts.append(block)
                secrets += [("private_key", b) for b in key_lines]
            else:
                v = GENERATORS[kind](rng)
                inserts.append([rng.choice(CONTEXTS[kind]).format(v=v)])
                secrets.append((kind, v))
        if style == "code":
            for block in inserts:
                at = rng.randint(0, len(lines))
                lines[at:at] = block
            body = "\n".join(lines) + "\n"
        elif style == "diff":
            start = rng.randint(1, max(1, len(lines) - 30))
            ctx = lines[start - 1 : start + 29]
            hunk = [" " + ln for ln in ctx]
            for block in inserts:
                at = rng.randint(0, len(hunk))
                hunk[at:at] = ["+" + b for b in block]
            removed = rng.randint(0, min(3, len(hunk)))
            hunk = hunk[:removed] and ["-" + h[1:] if h.startswith(" ") else h for h in hunk[:removed]] + hunk[removed:]
            body = (
                f"diff --git a/{Path(origin).name} b/{Path(origin).name}\n--- a/{Path(origin).name}\n"
                f"+++ b/{Path(origin).name}\n@@ -{start},30 +{start},{len(hunk)} @@\n" + "\n".join(hunk) + "\n"
            )
        else:
            log = [f"[{10 + j // 60:02d}:{j % 60:02d}:00] $ python -m pytest {Path(origin).name} -x" for j in range(3)]
            log += [f"[{j:05d}] {ln}" for j, ln in enumerate(lines[:60])]
            for block in inserts:
                at = rng.randint(0, len(log))
                log[at:at] = block
            body = "\n".join(log) + "\n"
        docs.append(PlantedDoc(body, secrets, style, origin))
    return docs


def measure(
    redact, planted: list[PlantedDoc], clean: list[tuple[str, str]], secret_kinds: set[str] | None = None
) -> RedactionReport:
    """``redact(text) -> (text, Counter of kinds)``; ``secret_kinds``: detector kinds that are not PII."""
    rep = RedactionReport()
    per: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0])
    for d in planted:
        out, _ = redact(d.text)
        if out.count("\n") != d.text.count("\n"):
            rep.structure_errors += 1
        if d.style == "diff":
            before = [ln[:1] for ln in d.text.splitlines()]
            after = [ln[:1] for ln in out.splitlines()]
            if before != after:
                rep.structure_errors += 1
        for kind, value in d.secrets:
            per[kind][1] += 1
            rep.planted += 1
            if value not in out:
                per[kind][0] += 1
                rep.caught += 1
            elif len(rep.missed) < 50:
                line = next((ln for ln in d.text.splitlines() if value in ln), value)
                rep.missed.append((kind, line[:200]))
    rep.per_kind = dict(sorted(per.items()))
    pii = {"email", "ip_address"}
    by_kind: Counter = Counter()
    for origin, text in clean:
        rep.clean_files += 1
        out, counts = redact(text)
        if counts:
            rep.clean_changed_any += 1
            by_kind.update(set(counts))
            secret_hits = (
                [k for k in counts if k not in pii]
                if secret_kinds is None
                else [k for k in counts if k in secret_kinds]
            )
            if secret_hits:
                rep.clean_changed_secrets += 1
                if len(rep.false_positive_examples) < 20:
                    rep.false_positive_examples.append((origin, secret_hits))
    rep.clean_changed_by_kind = dict(by_kind)
    return rep
