"""Provider profiles: the file, its references, and a thread's own variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from threadline.profiles import ProfileError, load_profiles, profiles_path, thread_env


def write(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "profiles.toml"
    path.write_text(text)
    return {"THREADLINE_PROFILES": str(path)}


def test_references_resolve_from_the_environment_and_files(tmp_path: Path) -> None:
    (tmp_path / "key").write_text("from-file\n")
    environ = write(
        tmp_path,
        f"""
[profiles.a]
backend = "claude"
model = "m"
mode = "print"
[profiles.a.env]
PLAIN = "p"
FROM_ENV = {{ env = "SOURCE" }}
FROM_FILE = {{ file = "{tmp_path / "key"}" }}
""",
    )
    [profile] = load_profiles(environ).values()
    assert (profile.name, profile.backend, profile.model, profile.mode) == (
        "a",
        "claude",
        "m",
        "print",
    )
    resolved = profile.resolve({**environ, "SOURCE": "from-env"})
    assert resolved == {"PLAIN": "p", "FROM_ENV": "from-env", "FROM_FILE": "from-file"}
    # unresolved: the message names the profile and the variable, never a value
    problems = profile.problems(environ)
    assert problems == ["profile 'a': FROM_ENV comes from the variable SOURCE, which is not set"]
    with pytest.raises(ProfileError, match="SOURCE"):
        profile.resolve(environ)


def test_a_missing_file_or_a_bad_reference_is_named(tmp_path: Path) -> None:
    environ = write(
        tmp_path,
        """
[profiles.b]
backend = "codex"
[profiles.b.env]
BOTH = { env = "X", file = "/y" }
GONE = { file = "/nonexistent/key" }
""",
    )
    profile = load_profiles(environ)["b"]
    problems = " ".join(profile.problems({"X": "1"}))
    assert "BOTH must name one of env or file, not both" in problems
    assert "/nonexistent/key" in problems


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[profiles.c]\nmodel = 'x'\n", "backend"),  # backend is required
        ("[profiles.c]\nbackend = 'claude'\nextra = 1\n", "extra"),  # unknown keys refused
        ("[profiles.c\n", "not valid"),  # not TOML
    ],
)
def test_an_invalid_file_says_where(tmp_path: Path, text: str, needle: str) -> None:
    environ = write(tmp_path, text)
    with pytest.raises(ProfileError, match=needle) as raised:
        load_profiles(environ)
    assert str(tmp_path / "profiles.toml") in str(raised.value)


def test_no_file_is_no_profiles_unless_one_is_named(tmp_path: Path) -> None:
    assert load_profiles({"XDG_CONFIG_HOME": str(tmp_path)}) == {}
    assert profiles_path({"XDG_CONFIG_HOME": str(tmp_path)}) == str(
        tmp_path / "threadline" / "profiles.toml"
    )
    with pytest.raises(ProfileError, match="does not exist"):
        load_profiles({"THREADLINE_PROFILES": str(tmp_path / "missing.toml")})


def test_a_threads_own_variables_need_the_operators_allow_list() -> None:
    assert thread_env({"TL_A": "1", "TL_X_B": "2"}, "TL_A, TL_X_*") == {"TL_A": "1", "TL_X_B": "2"}
    assert thread_env(None, "") == {}
    with pytest.raises(ValueError, match="not allowed"):
        thread_env({"TL_B": "1"}, "TL_A")
    with pytest.raises(ValueError, match="secret"):
        thread_env({"TL_X_TOKEN": "1"}, "TL_X_*")
    with pytest.raises(ValueError, match="object of string"):
        thread_env({"TL_A": 1}, "TL_A")
