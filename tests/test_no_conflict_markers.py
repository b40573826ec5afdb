"""No merge-conflict markers in the repository's text files (a merge once committed them in docs)."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^(<{7}|>{7})( |$)|^={7}$", re.M)
SUFFIXES = {".py", ".md", ".txt", ".toml", ".cfg", ".sh", ".c", ".h", ".json", ".yml", ".yaml"}
FOLDERS = ("tilecraft", "tests", "docs", "bench", "examples", ".ci")


def test_no_conflict_markers():
    found = []
    files = [ROOT / "README.md", ROOT / "pyproject.toml"]
    for folder in FOLDERS:
        files += [p for p in (ROOT / folder).rglob("*") if p.suffix in SUFFIXES and p.is_file()
                  and "ground_truth/.cache" not in p.as_posix()]
    for path in files:
        text = path.read_text(errors="replace")
        for m in MARKER.finditer(text):
            found.append(f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}")
    assert not found, "merge-conflict markers at " + ", ".join(found)
