"""Secret/PII redaction: planted-secret recall, clean-code false positives, structure, real build logs, spans."""

from __future__ import annotations

import subprocess
import sys

import pytest
from datatrove.data import Document

from midtrain.curate.planted import measure, plant, read_texts, real_code_files
from midtrain.curate.secrets import RedactConfig, Redactor, RedactSecrets


@pytest.fixture(scope="module")
def redactor() -> Redactor:
    return Redactor()


@pytest.mark.slow
def test_planted_recall_and_clean_false_positive_rate(redactor):
    texts = read_texts(real_code_files(500, seed=7))
    planted = plant(texts[:200], per_doc=3, seed=7)
    clean = texts[200:]
    rep = measure(redactor.redact, planted, clean)
    assert rep.planted >= 600 and rep.clean_files >= 250
    assert rep.recall >= 0.99, (rep.recall, rep.missed[:10])
    assert all(c / n >= 0.9 for c, n in rep.per_kind.values()), rep.per_kind
    assert rep.fp_rate <= 0.01, rep.false_positive_examples
    assert rep.structure_errors == 0


def test_every_kind_is_replaced_by_its_typed_placeholder(redactor):
    text = "\n".join(
        [
            'AWS_ACCESS_KEY_ID = "AKIAQ7ZX3B5N2KD8WJ4M"',
            'token = "ghp_' + "Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5" + '"',
            "SLACK=xoxb-12345678901-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
            'db = "postgres://app:Xy7!kq2Lp9@db.internal:5432/main"',
            'password = "Tr0ub4dor&3x"',
            "contact: maria.garcia7@globex.io from 93.184.216.34",
            "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        ]
    )
    out, counts = redactor.redact(text)
    for placeholder in (
        "<AWS_ACCESS_KEY>",
        "<GITHUB_TOKEN>",
        "<SLACK_TOKEN>",
        "<PASSWORD>",
        "<EMAIL>",
        "<IP_ADDRESS>",
        "<JWT>",
    ):
        assert placeholder in out, (placeholder, out)
    assert out.count("<PASSWORD>") == 2
    assert out.count("\n") == text.count("\n")
    assert set(counts) >= {
        "aws_access_key",
        "github_token",
        "slack_token",
        "url_password",
        "assigned_secret",
        "email",
        "ip_address",
        "jwt",
    }


def test_ordinary_code_is_left_alone(redactor):
    text = "\n".join(
        [
            "password = None",
            "password = getpass.getpass()",
            'prompt = "Enter your password: "',
            'token = os.environ["GITHUB_TOKEN"]',
            "key = hashlib.sha256(data).hexdigest()",
            'if password == "": raise ValueError',
            "def login(user, password=password):",
            "user_api_key_auth: UserAPIKeyAuth | None = None",
            'AWS_ACCESS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"',
            "y = x@W.T",
            "git clone git@github.com:owner/repo.git",
            "release 2.7.18.1 (version 1.2.3.4)",
            "listen on 127.0.0.1 and 10.0.0.5 and 192.168.1.20",
            "send to user@example.com",
            'api_key = "${API_KEY}"',
            "password: {{ vault_password }}",
            "token_type = 'Bearer'",
        ]
    )
    out, counts = redactor.redact(text)
    assert out == text, counts


def test_diff_structure_survives_a_private_key(redactor):
    key = [
        "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun",
        "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK",
        "LfVLPHCozMx==",
    ]
    diff = "\n".join(
        [
            "diff --git a/k.pem b/k.pem",
            "--- /dev/null",
            "+++ b/k.pem",
            "@@ -0,0 +1,5 @@",
            "+-----BEGIN RSA PRIVATE KEY-----",
            *("+" + k for k in key),
            "+-----END RSA PRIVATE KEY-----",
            " unchanged context",
            "-removed = 1",
            "",
        ]
    )
    out, counts = redactor.redact(diff)
    assert counts["private_key"] == 3
    assert [ln[:1] for ln in out.splitlines()] == [ln[:1] for ln in diff.splitlines()]
    assert out.count("\n") == diff.count("\n")
    assert not any(k.rstrip("=") in out for k in key)
    # escaped in a string literal (one line)
    one = 'KEY = "-----BEGIN PRIVATE KEY-----\\n' + "\\n".join(key) + '\\n-----END PRIVATE KEY-----\\n"'
    out1, _ = redactor.redact(one)
    assert "\n" not in out1 and "\\n<PRIVATE_KEY>\\n" in out1 and key[0] not in out1


def test_real_build_log_with_planted_tokens(tmp_path, redactor):
    """A real pytest run whose failing test prints credentials, as CI logs do."""
    gh = "ghp_" + "q8W2e4R6t8Y0u2I4o6P8a0S2d4F6g8H0j2K4"
    aws = "AKIA" + "J4K8M2N6P0Q4R8S2"
    (tmp_path / "test_deploy.py").write_text(
        "import os\n"
        "def test_deploy():\n"
        f"    env = {{'GITHUB_TOKEN': '{gh}', 'AWS_ACCESS_KEY_ID': '{aws}'}}\n"
        "    print('deploying with', env)\n"
        "    print('export DB_PASSWORD=Kx9!mQ2#vL7p')\n"
        "    print('POST https://deploy:S3cr3tPw0rd@ci.internal/api from 203.0.113.9 and 81.2.69.160')\n"
        "    assert env['GITHUB_TOKEN'] == 'x'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_deploy.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 1 and gh in log and "Kx9!mQ2#vL7p" in log  # the log really leaks them
    doc = Document(
        text=log, id="log-1", metadata={"source": "buildlog", "repo": "acme/app", "license": None, "id": "log-1"}
    )
    step = RedactSecrets(RedactConfig())
    out = list(step.run([doc]))[0]
    for secret in (gh, aws, "Kx9!mQ2#vL7p", "S3cr3tPw0rd", "81.2.69.160"):
        assert secret not in out.text, secret
    assert "203.0.113.9" in out.text  # documentation range (TEST-NET-3), not a real address
    assert out.text.count("\n") == log.count("\n")
    assert out.metadata["redactions"]["github_token"] >= 1
    assert step.stats["changed_redacted_doc"].total == 1


def test_loss_spans_follow_the_redaction():
    user = "user: my key is AKIAQ7ZX3B5N2KD8WJ4M, please rotate it\n"
    asst = "assistant: rotating key AKIAQ7ZX3B5N2KD8WJ4M for maria.garcia7@globex.io now\n"
    user2 = "user: thanks\n"
    text = user + asst + user2
    span = [len(user), len(user) + len(asst)]
    doc = Document(
        text=text,
        id="t1",
        metadata={"source": "trace", "repo": None, "license": None, "id": "t1", "loss_spans": [span]},
    )
    out = list(RedactSecrets(RedactConfig()).run([doc]))[0]
    ((s, e),) = out.metadata["loss_spans"]
    assert out.text[s:e] == "assistant: rotating key <AWS_ACCESS_KEY> for <EMAIL> now\n"
    assert out.text[e:] == user2


def test_redaction_can_be_narrowed_by_config():
    text = 'email me at maria.garcia7@globex.io; password = "Tr0ub4dor&3x"'
    out, counts = Redactor(RedactConfig(emails=False)).redact(text)
    assert "maria.garcia7@globex.io" in out and "<PASSWORD>" in out


def test_redaction_does_not_change_what_test_code_means(redactor):
    # a password prompt in a test's expected output: the rule must not run across the \n escape
    prompt = "<|file_sep|>tests/test_prompt.py\ndef test_prompt():\n    assert child.read() == 'Password: \\nScrew you.\\n'\n"
    assert redactor.redact(prompt)[0] == prompt
    # an unquoted value inside a string literal is the string's prose
    assert redactor.redact('log.info("password: hunter22 was rejected")\n')[0].count("<PASSWORD>") == 0
    form = 'password: <input name="password" type="password" size="30"><br>\n'  # a label before markup
    assert redactor.redact(form)[0] == form
    # fixtures in test files stay; the same values in library code are redacted
    fixtures = (
        "def test_login():\n    user = login('a@b.com', password='hunter22')\n    assert user.mail == 'x@corp.io'\n"
        "    db = connect('postgres://app:pw1234@db.local/main')\n"
    )
    in_test = "<|file_sep|>tests/test_login.py\n" + fixtures
    assert redactor.redact(in_test)[0] == in_test
    in_lib = "<|file_sep|>app/login.py\n" + fixtures
    out, counts = redactor.redact(in_lib)
    assert counts["assigned_secret"] == 1 and counts["url_password"] == 1 and counts["email"] == 1, counts
    assert "'a@b.com'" in out  # one-letter local part and domain: a fixture everywhere
    # the same in a commit's diff, and real-looking tokens are still replaced in tests
    diff = (
        "diff --git a/tests/test_api.py b/tests/test_api.py\n+    key = 'ghp_Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5'\n"
        "+    password = 'hunter22'\n"
    )
    out, counts = redactor.redact(diff)
    assert counts == {"github_token": 1}, counts
