"""Secret and PII redaction with typed placeholders (``<AWS_ACCESS_KEY>``, ``<PASSWORD>``, ``<EMAIL>`` ...).

Detectors are regular expressions for token formats with a fixed shape (cloud keys, GitHub/Slack/Stripe
tokens, JWTs, private-key blocks), plus context rules: a password in a URL, a value assigned to a name that
says it is a secret (``password = "..."``, ``API_TOKEN=...``, ``"client_secret": "..."``), an HTTP
``Authorization`` header, and e-mail and public IP addresses. Context rules skip obvious placeholders
(``"changeme"``, ``${TOKEN}``, ``os.environ[...]``) and, for names that are only *maybe* secret (``token``,
``key``), require a high-entropy value.

Redaction must not change what code means: a value never runs across a string's ``\\n`` escape or its
closing quote, and in test files (found by the ``<|file_sep|>path`` and ``diff --git`` headers of repository
and commit documents) obvious fixtures stay: e-mails with a one-letter local part or domain (``a@b.com``),
example domains, and passwords that are not random-looking (``password="hunter22"``); token formats
(cloud keys, ...) are replaced everywhere.

A replacement never contains or removes a newline, and a multi-line private key keeps every line (and
every diff prefix ``+``/``-``/`` ``): only the key material is replaced, line by line, so diffs stay diffs.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from datatrove.data import Document

from midtrain.config import Config, require
from midtrain.curate.base import CurationStep, Edit, apply_edits
from midtrain.curate.text import shannon_entropy
from midtrain.formats.repo_files import file_group

# ----------------------------------------------------------------------------------------------------------
# config


@dataclass
class RedactConfig(Config):
    """Secret/PII redaction (all sources)."""

    enabled: bool = True
    secrets: bool = True  # API keys, tokens, private keys, passwords
    emails: bool = True
    ip_addresses: bool = True  # public (globally routed) addresses only
    min_generic_entropy: float = 3.0  # bits/char for a value assigned to a maybe-secret name (token, key)
    min_generic_length: int = 16
    keep_email_domains: list[str] = field(
        default_factory=lambda: ["example.com", "example.org", "example.net", "localhost", "users.noreply.github.com"]
    )

    def check(self) -> None:
        require(0.0 <= self.min_generic_entropy <= 8.0, "min_generic_entropy", "must be in [0, 8] bits/char")
        require(self.min_generic_length >= 8, "min_generic_length", "must be >= 8")


# ----------------------------------------------------------------------------------------------------------
# detectors: (type, compiled regex, placeholder); group "s" (if present) is the part replaced

_B = r"(?<![A-Za-z0-9_])"  # left boundary that also works before '-' or '_'
_E = r"(?![A-Za-z0-9_])"

TOKEN_PATTERNS: list[tuple[str, str, str]] = [
    (
        "aws_access_key",
        _B + r"(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|A3T[A-Z0-9])[A-Z0-9]{16}" + _E,
        "<AWS_ACCESS_KEY>",
    ),
    ("github_token", _B + r"(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})" + _E, "<GITHUB_TOKEN>"),
    ("gitlab_token", _B + r"glpat-[A-Za-z0-9_-]{20,}" + _E, "<GITLAB_TOKEN>"),
    ("slack_webhook", r"https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9_/-]{20,}", "<SLACK_WEBHOOK>"),
    ("slack_token", _B + r"xox[abposr]-[A-Za-z0-9-]{10,}" + _E, "<SLACK_TOKEN>"),
    ("google_api_key", _B + r"AIza[0-9A-Za-z_-]{35}" + _E, "<GOOGLE_API_KEY>"),
    ("stripe_key", _B + r"(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{16,}" + _E, "<STRIPE_KEY>"),
    ("openai_key", _B + r"sk-(?:proj-|ant-(?:api\d\d-)?|svcacct-)?[A-Za-z0-9_-]{32,}" + _E, "<API_KEY>"),
    ("huggingface_token", _B + r"hf_[A-Za-z0-9]{34,}" + _E, "<HF_TOKEN>"),
    ("npm_token", _B + r"npm_[A-Za-z0-9]{36}" + _E, "<NPM_TOKEN>"),
    ("pypi_token", _B + r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{40,}" + _E, "<PYPI_TOKEN>"),
    ("sendgrid_key", _B + r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}" + _E, "<SENDGRID_KEY>"),
    ("twilio_key", _B + r"SK[0-9a-f]{32}" + _E, "<TWILIO_KEY>"),
    ("azure_storage_key", r"[Aa]ccount[Kk]ey=(?P<s>[A-Za-z0-9+/]{86}==)", "<AZURE_KEY>"),
    ("jwt", _B + r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}" + _E, "<JWT>"),
]

# literals every match of a token pattern contains, where its own scan is slow (a common first character)
_TOKEN_LITERALS = {"stripe_key": ("_live_", "_test_"), "azure_storage_key": ("ccount",)}

PRIVATE_KEY_RE = re.compile(
    r"-----BEGIN (?P<kind>[A-Z0-9 ]*?)PRIVATE KEY( BLOCK)?-----(?P<body>.*?)"
    r"-----END [A-Z0-9 ]*?PRIVATE KEY( BLOCK)?-----",
    re.DOTALL,
)
# inside a key block: separators (real or escaped newlines, quotes, diff/concat syntax) vs key material
_KEY_SPLIT_RE = re.compile(r"(\\[nr]|\r?\n|[\"',;\s]+)")
_KEY_LINE_RE = re.compile(r"[A-Za-z0-9+/=]{40,}")  # a real key block has long base64 lines
_KEY_MATERIAL_RE = re.compile(r"[A-Za-z0-9+/=:-]{4,}")

# scheme://user:PASSWORD@host, matched right after each "://" (found by a plain string search: fast)
URL_USERINFO_RE = re.compile(r"(?P<user>[^\s:/@'\"<>]{1,64}):(?P<s>[^\s@/'\"<>]{1,128})@(?=[\w.\[-])")
_SCHEME_SET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+.-")

# name = value assignments in code, config, env files and logs. A fast scan finds a keyword, then the
# identifier around it and the operator/value after it are checked; the name tells how sure we are.
KEYWORD_RE = re.compile(
    r"pass|pwd|secret|token|key|auth|credential|signature|PASS|PWD|SECRET|TOKEN|KEY|AUTH|"
    r"CREDENTIAL|SIGNATURE"
)  # matched on lower-cased text: much faster than IGNORECASE
KEYWORDS = ("pass", "pwd", "secret", "token", "key", "auth", "credential", "signature")  # KEYWORD_RE, lower case
_IDENT_CHARS = re.compile(r"[A-Za-z0-9_.-]*")
_IDENT_SET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_EMAIL_LOCAL_SET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._%+-")
SURE_NAME_RE = re.compile(
    r"(?i)passw(?:or)?d|passwd|pwd|pass_?phrase|secret|credentials?|auth_?token|access_?token|refresh_?token|"
    r"api_?token|bearer_?token|session_?token|api_?key|apikey|access_?key|app_?key|master_?key|signing_?key|"
    r"encryption_?key|private_?key"
)
MAYBE_NAME_RE = re.compile(r"(?i)(?:^|[_.-]|(?<=[a-z])(?=[A-Z]))(?:token|key|auth|signature|sig)s?$")
# names that hold *about* a secret, not the secret: password_field, token_type, api_key_header, keyfile ...
NOT_SECRET_NAME_RE = re.compile(
    r"(?i)(?:^|[_.-]|(?<=[a-z])(?=[A-Z]))(?:name|field|label|prompt|header|env|var|variable|path|file|type|"
    r"types|dict|len|length|url|uri|hint|policy|required|enabled|min|max|regex|re|pattern|help|msg|message|"
    r"error|format|fmt|id|ids|count|size|mode|kind|class|cls|provider|manager|source|store|param|arg|option|"
    r"column|col|attr|attribute|prefix|suffix|template|endpoint|location|details|info|config|setting|"
    r"settings|version|list|map|cache|method|fn|func|callback|handler|hook|index|idx|alias|schema|spec|flag|"
    r"hash|digest|checksum|reset|strength|validator|input|widget|form|character|char|chars|ref|reference|"
    r"expiry|expires|ttl|timeout|limit|usage|encoding|algorithm|alg|bits|storage|backend|func|s)$"
)
VALUE_AFTER_NAME_RE = re.compile(
    r"(?P<q1>[\"']?)[ \t]*(?P<op>:=|=>|==|=|:(?!:))[ \t]*"
    r"(?:(?P<q>[\"'`])(?P<qv>[^\"'`\n]{1,400})(?P=q)|(?P<uv>[^\s\"'`,;}\]\\]{1,400}))"
)
AUTH_HEADER_RE = re.compile(
    r"(?i)\b(?:authorization|proxy-authorization)\s*[:=]\s*[\"']?(?:bearer|basic|token)\s+"
    r"(?P<s>[A-Za-z0-9._~+/=-]{12,})"
)
BEARER_RE = re.compile(r"(?i)\bbearer\s+(?P<s>[A-Za-z0-9._~+/-]{20,}=*)")

EMAIL_RE = re.compile(
    r"(?P<s>[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@(?P<domain>(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}"
    r"[A-Za-z0-9])?\.)+(?P<tld>[A-Za-z]{2,24})))(?![A-Za-z0-9-]|\.[A-Za-z0-9])"
)
IPV4_CANDIDATE_RE = re.compile(r"[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}")  # cheap scan, then checked
IPV4_RE = re.compile(
    r"(?P<s>(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))"
    r"(?![\w]|\.\d)"
)
# the IP scans run only around these (literal first character: found at string-search speed)
_IPV4_HINT, _IPV4_CHARS = re.compile(r"\.[0-9]"), frozenset("0123456789.")
_IPV6_HINT, _IPV6_CHARS = re.compile(r":[0-9a-fA-F:]"), frozenset("0123456789abcdefABCDEF:")
IPV6_RE = re.compile(
    r"(?P<s>(?:[0-9a-fA-F]{1,4}:){2,7}(?::|[0-9a-fA-F]{1,4})(?:::?[0-9a-fA-F]{1,4})*)"
    r"(?![\w:.])"
)

# values that are clearly not real secrets: templates, references, masks, the usual placeholders
_PLACEHOLDER_RE = re.compile(
    r"^(?:\$\{?[\w.-]+\}?|\{\{.*\}\}|\{[\w.]*\}|%\(?\w*\)?s|<[^>]*>|\*+|x+|\.{3}|null|none|nil|true|false|"
    r"undefined|empty|required|optional|string|str|bytes|int|bool|text|password|passwd|pass|secret|token|"
    r"changeme|change_me|example|sample|dummy|test|testing|foo|bar|foobar|baz|abc|admin|root|user|"
    r"username|your[-_ ]?\w*|my[-_ ]?\w*|env|environ|getenv|os|self|config|settings|default|value|"
    r"redacted|hidden|placeholder|tbd|todo|fixme|pwd|secret_?key|api_?key|\[redacted\]|[a-z]+_(?:here|placeholder))$",
    re.IGNORECASE,
)
_CODE_VALUE_RE = re.compile(
    r"[()\[\]{}]|^(?:self|this|cls|os|env|process|config|settings|args|kwargs|options|opts|"
    r"params|request|ctx|cfg|conf|data|get|new|await|lambda|function|def|return|if|not)\b|"
    r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_]|^\$|^%|^@|^&|^!|^-|::|->"
)
_EMAIL_TLDS = set(
    """com org net edu gov mil int io dev ai app co info biz me us uk de fr nl be ch at it es pt se no dk
fi pl cz ru ua jp cn kr in au nz ca br mx ar za il tr gr hu ro ie is lu sk si hr rs bg lt lv ee sg hk tw my th vn id
ph pk eg ng ke cl pe ve cc tv ws xyz online site tech cloud email name pro mobi asia tel eu page""".split()
)
_DIFF_PREFIXES = ("+", "-", " ")


# file headers in repository documents and diffs: the file each following span of text belongs to
_FILE_HEADER_RE = re.compile(r"^(?:<\|file_sep\|>|diff --git a/)(\S+)", re.MULTILINE)
_FIXTURE_EMAIL_DOMAINS = (
    "example",
    "test",
    "invalid",
    "localhost",
    "foo",
    "bar",
    "baz",
    "domain",
    "yourdomain",
    "mydomain",
    "company",
    "acme",
    "email",
    "somewhere",
    "host",
)


_NON_SPACE_RE = re.compile(r"\S+")


def _file_headers(text: str) -> list[tuple[int, str]]:
    """(start, path) of each ``_FILE_HEADER_RE`` match, found by string search for the two header prefixes."""
    out = []
    for prefix in ("<|file_sep|>", "diff --git a/"):
        at = text.find(prefix)
        while at >= 0:
            if at == 0 or text[at - 1] == "\n":
                m = _NON_SPACE_RE.match(text, at + len(prefix))
                if m:
                    out.append((at, m.group()))
            at = text.find(prefix, at + 1)
    return sorted(out)


def test_regions(text: str) -> list[tuple[int, int]]:
    """(start, end) of the parts of ``text`` under a test file's header."""
    heads = [(start, file_group(path) == 1) for start, path in _file_headers(text)]
    return [
        (a, heads[i + 1][0] if i + 1 < len(heads) else len(text)) for i, (a, is_test) in enumerate(heads) if is_test
    ]


def _inside(pos: int, regions: list[tuple[int, int]]) -> bool:
    return any(a <= pos < b for a, b in regions)


def _in_string(text: str, pos: int) -> bool:
    """True when ``pos`` is inside a one-line string literal (an odd number of one kind of quote before it on
    its line): an unquoted value there is the string's prose, e.g. a password prompt."""
    line = text[text.rfind("\n", 0, pos) + 1 : pos]
    return any(line.count(q) - line.count("\\" + q) & 1 for q in "\"'")


@dataclass
class Finding:
    kind: str
    start: int
    end: int
    placeholder: str


class Redactor:
    """Find secrets/PII in a string and replace them; pure, reusable (bench and tests call it directly)."""

    def __init__(self, cfg: RedactConfig | None = None):
        self.cfg = cfg or RedactConfig()
        # One scan per pattern, the left boundary checked in Python: a pattern that starts with a literal
        # is scanned for at memchr speed, which a lookbehind or an alternation of patterns prevents (10x).
        self.tokens = [
            (k, re.compile(p[len(_B) :] if p.startswith(_B) else p), ph, p.startswith(_B))
            for k, p, ph in TOKEN_PATTERNS
        ]
        self.keep_domains = tuple(d.lower() for d in self.cfg.keep_email_domains)

    # -- detection ----------------------------------------------------------------------------------------
    def find(self, text: str) -> list[Finding]:
        found: list[Finding] = []
        cfg = self.cfg
        low = text.lower()
        tests = test_regions(text) if ("<|file_sep|>" in text or "diff --git" in text) else []
        if cfg.secrets:
            for m in PRIVATE_KEY_RE.finditer(text) if "PRIVATE KEY" in text else ():
                if len(m.group("body")) < 20_000 and _KEY_LINE_RE.search(m.group("body")):
                    found.extend(self._key_block(m))
            for kind, rx, ph, bounded in self.tokens:
                if kind in _TOKEN_LITERALS and not any(lit in text for lit in _TOKEN_LITERALS[kind]):
                    continue  # a match needs one of these: a plain search rules it out much faster
                for m in rx.finditer(text):
                    if bounded and m.start() and (text[m.start() - 1].isalnum() or text[m.start() - 1] == "_"):
                        continue
                    s, e = m.span("s") if "s" in rx.groupindex else m.span()
                    if "EXAMPLE" not in text[s:e].upper():  # vendors' documented sample keys
                        found.append(Finding(kind, s, e, ph))
            for m in self._url_passwords(text):
                pw = m.group("s")
                if tests and _inside(m.start(), tests) and not _looks_random(pw, cfg.min_generic_entropy, 12):
                    continue  # a test's fixture credentials (postgres://user:pw1234@db)
                if not _PLACEHOLDER_RE.match(pw) and not re.match(r"\d+(?:,|$)", pw) and pw != m.group("user"):
                    found.append(Finding("url_password", *m.span("s"), "<PASSWORD>"))
            for m in AUTH_HEADER_RE.finditer(text) if "authoriz" in low else ():
                if _looks_random(m.group("s"), cfg.min_generic_entropy, 12):
                    found.append(Finding("auth_header", *m.span("s"), "<TOKEN>"))
            for m in BEARER_RE.finditer(text) if "bearer" in low else ():
                if _looks_random(m.group("s"), cfg.min_generic_entropy, 20):
                    found.append(Finding("bearer_token", *m.span("s"), "<TOKEN>"))
            for f in self._assignments(text, low):
                if (
                    tests
                    and _inside(f.start, tests)
                    and not _looks_random(text[f.start : f.end], cfg.min_generic_entropy, 12)
                ):
                    continue  # a test's fixture password
                found.append(f)
        if cfg.emails:
            for m in self._emails(text):
                dom = m.group("domain").lower()
                local = m.group("s").split("@", 1)[0]
                if (
                    m.group("tld").lower() not in _EMAIL_TLDS
                    or dom.endswith(self.keep_domains)
                    or dom.split(".")[0] in _FIXTURE_EMAIL_DOMAINS
                    or m.group("s").lower().startswith("git@")
                ):
                    continue
                short = (len(local) == 1) + (len(dom.split(".")[0]) == 1)
                if short == 2 or (short and _inside(m.start(), tests)):
                    continue  # fixtures: a@b.com anywhere; x@corp.io and jane@x.org in tests
                found.append(Finding("email", *m.span("s"), "<EMAIL>"))
        if cfg.ip_addresses:
            for c in _runs_matching(IPV4_CANDIDATE_RE, text, _IPV4_HINT, _IPV4_CHARS, 0):
                before = text[c.start() - 1] if c.start() else " "
                after = text[c.end() : c.end() + 2]
                if (
                    before.isalnum()
                    or before in "_.:"
                    or (after[:1].isalnum() or after[:1] == "_")
                    or (after[:1] == "." and after[1:2].isdigit())
                ):
                    continue
                if IPV4_RE.fullmatch(c.group()) and _public_ip(c.group(), text, c.start()):
                    found.append(Finding("ip_address", c.start(), c.end(), "<IP_ADDRESS>"))
            if "::" in text or re.search(r"[0-9a-fA-F]:[0-9a-fA-F]", text):
                for m in _runs_matching(IPV6_RE, text, _IPV6_HINT, _IPV6_CHARS, 1):
                    before = text[m.start() - 1] if m.start() else " "
                    if (before.isalnum() or before in "_.:") is False and _public_ip(m.group("s"), text, m.start("s")):
                        found.append(Finding("ip_address", *m.span("s"), "<IP_ADDRESS>"))
        return _resolve_overlaps(found)

    def _key_block(self, m: re.Match) -> list[Finding]:
        """Key material inside a BEGIN/END block, replaced piece by piece so lines and diff prefixes stay."""
        out = []
        pos = m.start("body")
        for line in m.group("body").splitlines(keepends=True):
            lead = 1 if line[:1] in _DIFF_PREFIXES and pos != m.start("body") else 0  # a diff line's prefix
            off = pos + lead
            for part in _KEY_SPLIT_RE.split(line[lead:]):
                if part and not _KEY_SPLIT_RE.fullmatch(part):
                    for km in _KEY_MATERIAL_RE.finditer(part):
                        if not km.group().endswith(":"):  # "Proc-Type:" style header names stay
                            out.append(Finding("private_key", off + km.start(), off + km.end(), "<PRIVATE_KEY>"))
                off += len(part)
            pos += len(line)
        return out

    def _assignments(self, text: str, low: str) -> list[Finding]:
        out, done = [], -1
        if len(low) != len(text):  # a few non-ASCII letters change length when lower-cased
            low = text
        if low is text:  # the text itself: lower- and UPPER-case keywords
            hits: Iterable[tuple[int, int]] = ((k.start(), k.end()) for k in KEYWORD_RE.finditer(text))
        else:  # lower-cased text: KEYWORD_RE's lower-case words, by plain string search
            hits = _literal_matches(low, KEYWORDS)
        for k_start, k_end in hits:
            if k_start < done:
                continue  # same identifier as the previous keyword
            start = _scan_back(text, k_start, _IDENT_SET, 100)
            if start > 0 and text[start - 1] == ":":
                continue  # C++/Rust paths (DispatchKey::X), ARNs (arn:aws:secretsmanager:...)
            ident = _IDENT_CHARS.match(text, k_end)  # a `*` pattern: always matches, maybe empty
            end = ident.end() if ident else k_end
            done = end
            name = text[start:end].rstrip(".-")
            m = VALUE_AFTER_NAME_RE.match(text, start + len(name))
            if m:
                f = self._assignment(name, m, _yaml_like(text, start, m))
                if (
                    f
                    and m.group("uv") is not None
                    and _in_string(text, start)
                    and not _looks_random(m.group("uv"), self.cfg.min_generic_entropy, 12)
                ):
                    continue  # prose inside a string literal: a prompt or a message ("Password: try again")
                if f:
                    out.append(f)
        return out

    def _assignment(self, name: str, m: re.Match, yaml_like: bool = False) -> Finding | None:
        if m.group("op") == "==":  # a comparison, not a value
            return None
        quoted = m.group("qv") is not None
        value = m.group("qv") if quoted else m.group("uv")
        if quoted and re.search(r"\\[nrt]", value):
            return None  # text with escaped line breaks: a message, not a secret
        if not quoted and value.startswith("<"):
            return None  # markup after a label (password: <input ...>) or a <placeholder>

        span = m.span("qv") if quoted else m.span("uv")
        v = value.strip()
        if (
            not v
            or _PLACEHOLDER_RE.match(v)
            or "EXAMPLE" in v.upper()
            or "..." in v
            or "\u2026" in v
            or not re.search(r"[A-Za-z0-9]", v)
        ):
            return None  # placeholders, elisions (sk-...), masks (****)
        if not quoted and not yaml_like and m.group("op") == ":" and re.search(r"[/*]", v):
            return None  # paths and globs
        # env/CLI style (API_TOKEN=..., --password=...) and YAML values are literals; in code an unquoted
        # value is an expression or a variable: password=get_password(), key=self.key, token=tok
        tight = re.match(r"[\"']?=[^\s=]", m.group()) is not None  # NAME=value, no spaces: env files, CLI
        env = tight and (re.fullmatch(r"[A-Z0-9_]+", name) is not None or name.startswith("-"))
        literal = quoted or yaml_like or env
        if not literal and _CODE_VALUE_RE.search(v):
            return None
        if (
            not (quoted or env)
            and v.rstrip(":").isidentifier()
            and not _looks_random(v, 3.0, 12)
            and not (yaml_like and v[0].islower() and re.search(r"\d", v))
        ):
            return None  # a variable or a type: password=passwd, token: TokenType (but YAML password: hunter2)
        if yaml_like and re.fullmatch(r"[A-Za-z_][\w.]*(?:\[.*\]|\(.*\))(?:\s*\|.*)?", v):
            return None  # a type annotation (password: Optional[str]) or a call, not a YAML value
        if NOT_SECRET_NAME_RE.search(name):
            return None
        sure = SURE_NAME_RE.search(name) is not None
        if sure:
            if " " in v and not _looks_random(v.replace(" ", ""), self.cfg.min_generic_entropy, 12):
                return None  # a sentence: prompt="Enter your password: "
            if len(v) < 6 or _word_like(v):
                return None  # a number, a CONSTANT_NAME, a dotted.name or a word
            if re.fullmatch(r"[0-9a-f]{6,19}", v) and not re.search(r"(?i)pass|pwd", name):
                return None  # short hex ids (schema hashes, commit prefixes)
            ph = "<PASSWORD>" if re.search(r"(?i)pass|pwd", name) else "<SECRET>"
            return Finding("assigned_secret", span[0], span[0] + len(value), ph)
        if re.search(r"\\[xuU0-7]|&#|&[lg]t;|\[.*\]", v):
            return None  # escaped text or a regular expression, not a key
        if (
            MAYBE_NAME_RE.search(name)
            and " " not in v
            and _looks_random(v, self.cfg.min_generic_entropy, self.cfg.min_generic_length)
        ):
            if re.fullmatch(r"[0-9a-fA-F]+", v) and len(v) < 32:
                return None  # short hex: ids and hashes, not keys
            return Finding("generic_secret", span[0], span[0] + len(value), "<SECRET>")
        return None

    def _url_passwords(self, text: str) -> Iterator[re.Match]:
        at = text.find("://")
        while at >= 0:
            if _scan_back(text, at, _SCHEME_SET, 20) < at:  # a scheme before "://"
                m = URL_USERINFO_RE.match(text, at + 3)
                if m:
                    yield m
            at = text.find("://", at + 3)

    def _emails(self, text: str) -> Iterator[re.Match]:
        """EMAIL_RE matched only around each '@' (a full scan of big files is slow)."""
        last = -1
        for at in re.finditer("@", text):
            start = _scan_back(text, at.start(), _EMAIL_LOCAL_SET, 64)
            while start < at.start() and not text[start].isalnum():  # a diff prefix "+", a list dash
                start += 1
            if start < last or start == at.start() or (start and text[start - 1] in ":/"):
                continue  # nothing before '@', or URL userinfo (scheme://user:pw@host)
            m = EMAIL_RE.match(text, start, min(len(text), at.end() + 256))
            if m and m.end() <= len(text) and EMAIL_RE.fullmatch(m.group()):
                last = m.end()
                yield m

    # -- replacement --------------------------------------------------------------------------------------
    def redact(self, text: str) -> tuple[str, Counter]:
        """Return (redacted text, counts by kind)."""
        findings = self.find(text)
        counts: Counter[str] = Counter()
        out, pos = [], 0
        for f in findings:
            out.append(text[pos : f.start])
            out.append(f.placeholder)
            pos = f.end
            counts[f.kind] += 1
        out.append(text[pos:])
        return "".join(out), counts


_WORD = r"(?:[a-z]+|[A-Z][a-z]+)(?:[A-Z][a-z]+)*"  # word, camelCase, CamelCase: unambiguous, linear time
_WORDLIKE_RE = re.compile(
    rf"[\d.]+|[A-Z0-9_]+|{_WORD}(?:[._-]{_WORD})*|[\w./-]*/[\w./-]*"
    r"|[\w-]+\.(?:py|js|ts|json|yaml|yml|txt|cfg|ini|toml|pem|key|crt)"
)


def _yaml_like(text: str, start: int, m: re.Match) -> bool:
    """``key: value`` alone on its line (YAML, logs): the value is a literal, whatever characters it has."""
    if m.group("op") != ":" or m.group("q1") or m.group("uv") is None:
        return False
    line_start = text.rfind("\n", 0, start) + 1
    if text[line_start:start].strip(" \t-+") != "":  # only indentation, a list dash or a diff prefix before
        return False
    eol = text.find("\n", m.end())
    rest = text[m.end() : eol if eol >= 0 else len(text)]
    return rest.strip() == "" or rest.lstrip().startswith("#")


def _literal_matches(text: str, words: tuple[str, ...]) -> list[tuple[int, int]]:
    """(start, end) of what ``re.finditer("|".join(words), text)`` matches, found by plain string search (an
    alternation of literals is scanned character by character). No word may be a prefix of another."""
    found = []
    for w in words:
        at = text.find(w)
        while at >= 0:
            found.append((at, at + len(w)))
            at = text.find(w, at + 1)
    found.sort()
    out, last = [], 0
    for start, end in found:
        if start >= last:  # finditer resumes after each match: overlapping occurrences are not matches
            out.append((start, end))
            last = end
    return out


def _runs_matching(
    rx: re.Pattern, text: str, hint: re.Pattern, run_chars: frozenset, lookahead: int
) -> Iterator[re.Match]:
    """What ``rx.finditer(text)`` yields, for a pattern whose matches consist of ``run_chars`` only and always
    contain a ``hint`` match: rx is run over each maximal run of those characters around a hint (and the
    ``lookahead`` characters after it), which the hint's literal start finds at string-search speed."""
    done, n = -1, len(text)
    for h in hint.finditer(text):
        if h.start() < done:
            continue  # inside a run already searched
        start = _scan_back(text, h.start(), run_chars, n)
        end = h.start()
        while end < n and text[end] in run_chars:
            end += 1
        done = end
        yield from rx.finditer(text, start, min(n, end + lookahead))


def _scan_back(text: str, pos: int, chars: frozenset, limit: int) -> int:
    """Start of the run of ``chars`` ending at ``pos`` (at most ``limit`` long)."""
    i, stop = pos, max(0, pos - limit)
    while i > stop and text[i - 1] in chars:
        i -= 1
    return i


def _word_like(v: str) -> bool:
    """Numbers, CONSTANTS, words, CamelCase names, paths and file names: not secrets themselves."""
    return bool(_WORDLIKE_RE.fullmatch(v)) and not _looks_random(v, 3.3, 12)


_CHUNK_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def _looks_random(v: str, min_entropy: float, min_len: int) -> bool:
    """High-entropy, mixed-class strings (real tokens), not words, paths, numbers or hex-free identifiers."""
    if len(v) < min_len:
        return False
    if _WORDLIKE_RE.fullmatch(v) and not re.search(r"\d", v):
        return False  # words, CONSTANTS, CamelCase, paths
    classes = sum(bool(re.search(p, v)) for p in (r"[a-z]", r"[A-Z]", r"\d"))
    if classes < 2:
        return False
    # identifiers made of words (UserAPIKeyAuth, get_access_token2): long chunks, few digits
    chunks = _CHUNK_RE.findall(v)
    if chunks and sum(map(len, chunks)) / len(chunks) >= 3.5 and len(re.findall(r"\d", v)) <= 2:
        return False
    return shannon_entropy(v) >= min_entropy


def _public_ip(s: str, text: str, start: int) -> bool:
    try:
        ip = ipaddress.ip_address(s)
    except ValueError:
        return False
    if not ip.is_global:
        return False
    if ip.version == 4:
        # version numbers: "version 1.2.3.4", "v1.2.3.4", "==1.2.3.4"
        before = text[max(0, start - 12) : start].lower()
        if re.search(r"(?:version|ver|v|==|>=|<=|~=|release)\s*$", before):
            return False
        if s.count(".") == 3 and all(len(p) == 1 for p in s.split(".")):  # 1.2.3.4-like version strings
            return False
    else:
        if s.count(":") < 3:
            return False
    return True


def _resolve_overlaps(found: list[Finding]) -> list[Finding]:
    """Sort and keep the first of overlapping findings (longest wins at equal start)."""
    found.sort(key=lambda f: (f.start, -(f.end - f.start)))
    out: list[Finding] = []
    last_end = -1
    for f in found:
        if f.start >= last_end and f.end > f.start:
            out.append(f)
            last_end = f.end
    return out


# ----------------------------------------------------------------------------------------------------------
# the datatrove step


class RedactSecrets(CurationStep):
    """Replace secrets and PII in every document; counts ``changed_redacted_doc`` and ``redacted_<kind>``."""

    name = "🔐 redact secrets/PII"
    step_name = "redact"

    def __init__(self, cfg: RedactConfig, exclusion_dir: str | None = None):
        super().__init__(exclusion_dir)
        self.cfg = cfg
        self._redactor: Redactor | None = None

    def process(self, doc: Document) -> None:
        if self._redactor is None:
            self._redactor = Redactor(self.cfg)
        findings = self._redactor.find(doc.text)
        if not findings:
            return
        counts = Counter(f.kind for f in findings)
        for kind, n in counts.items():
            self.stat_update(f"redacted_{kind}", value=n)
        self.change("redacted_doc")
        doc.metadata["redactions"] = dict(counts)
        apply_edits(doc, [Edit(f.start, f.end, f.placeholder) for f in findings])
