"""`ors-server serve --codeact` refuses to start without its sandbox unless the operator opts out."""

from __future__ import annotations

import pytest

from ors_server.cli import main


@pytest.mark.usefixtures("no_bwrap")
def test_codeact_without_bwrap_refuses_to_start_and_says_how_to_opt_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORS_CODEACT_SANDBOX", raising=False)
    with pytest.raises(SystemExit, match="bubblewrap.*not installed.*ORS_CODEACT_SANDBOX=none"):
        main(["serve", "--codeact", "--env", "frozen_lake"])


def test_an_unknown_sandbox_is_a_plain_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORS_CODEACT_SANDBOX", "docker")
    with pytest.raises(SystemExit, match="codeact_sandbox must be 'bwrap' or 'none'"):
        main(["serve", "--codeact", "--env", "frozen_lake"])
