"""Automation accounts: one list for every source that drops or marks what bots wrote (pull requests by who
opened them, comments and reviews, commits by author)."""

from __future__ import annotations

import re
from typing import Any

# well-known CI, dependency-update and repository-maintenance accounts (with or without GitHub's "[bot]")
KNOWN_BOTS = (
    "allcontributors",
    "bors",
    "codecov",
    "codecov-commenter",
    "coveralls",
    "dependabot",
    "gitpod-io",
    "github-actions",
    "greenkeeper",
    "imgbot",
    "k8s-ci-robot",
    "mergify",
    "netlify",
    "openshift-ci",
    "pre-commit-ci",
    "pyup-bot",
    "renovate",
    "semantic-release-bot",
    "snyk-bot",
    "sonarcloud",
    "stale",
    "vercel",
    "web-flow-bot",
    "welcome",
)
# a known name, alone or as the first word ("dependabot-preview", "renovate bot"), "[bot]" anywhere, or a name
# or e-mail local part that ends in "bot" as a word ("docs-bot", "bot@renovateapp.com")
_BOT = re.compile(
    r"\[bot\]|^(?:" + "|".join(re.escape(b) for b in KNOWN_BOTS) + r")(?![\w])|(?:^|[-_.\s])bot(?:@|$)",
    re.IGNORECASE,
)


def is_bot_name(name: str, email: str = "") -> bool:
    """A login, a name or an e-mail (its local part) of an automation account."""
    local = email.split("@")[0]
    return bool(_BOT.search(name.strip()) or (local and _BOT.search(local.strip() + "@")))


def is_bot_user(user: Any) -> bool:
    """A GitHub-API user (``{"login", "type"}``, or a bare login) that is a bot."""
    if isinstance(user, dict):
        if str(user.get("type") or "").lower() == "bot":
            return True
        email = str(user.get("email") or "")
        return is_bot_name(str(user.get("login") or ""), email) or is_bot_name(str(user.get("name") or ""))
    return is_bot_name(str(user or ""))
