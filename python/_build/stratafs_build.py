"""A minimal PEP 517 build backend for stratafs, standard library only.

It builds a pure-Python wheel of src/stratafs (and an sdist) so that
``pip install ./python`` needs no network: pip installs a backend's
``requires`` into an isolated build environment, and ours requires nothing.
The metadata comes from pyproject.toml's [project] table (read with
tomllib when present, else by a small parser that understands the simple
keys used here).
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = "stratafs"


def _project():
    path = os.path.join(ROOT, "pyproject.toml")
    try:
        import tomllib  # Python 3.11+

        with open(path, "rb") as f:
            return tomllib.load(f)["project"]
    except ImportError:
        pass
    proj, section = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("["):
                section = line.strip("[]")
                continue
            m = re.match(r'^([A-Za-z_-]+)\s*=\s*"(.*)"$', line)
            if section == "project" and m:
                proj[m.group(1)] = m.group(2)
    return proj


def _metadata():
    p = _project()
    lines = [
        "Metadata-Version: 2.1",
        "Name: " + p["name"],
        "Version: " + p["version"],
        "Summary: " + p.get("description", ""),
        "Requires-Python: " + p.get("requires-python", ">=3.9"),
    ]
    for c in p.get("classifiers", []) if isinstance(p.get("classifiers"), list) else []:
        lines.append("Classifier: " + c)
    readme = os.path.join(ROOT, "README.md")
    body = ""
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            body = f.read()
    return p, "\n".join(lines) + "\n\n" + body


def _files():
    src = os.path.join(ROOT, "src", PKG)
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")):
                continue
            full = os.path.join(dirpath, name)
            yield full, os.path.relpath(full, os.path.join(ROOT, "src")).replace(os.sep, "/")


def _record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "sha256=" + digest


def _tag():
    return "py3-none-any"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def _dist_info(p):
    return "%s-%s.dist-info" % (p["name"], p["version"])


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    p, meta = _metadata()
    d = os.path.join(metadata_directory, _dist_info(p))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w", encoding="utf-8") as f:
        f.write(meta)
    with open(os.path.join(d, "WHEEL"), "w", encoding="utf-8") as f:
        f.write(_wheel_file())
    return os.path.basename(d)


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def _wheel_file():
    return "Wheel-Version: 1.0\nGenerator: stratafs_build\nRoot-Is-Purelib: true\nTag: %s\n" % _tag()


def _write_wheel(wheel_directory, entries):
    p, meta = _metadata()
    name = "%s-%s-%s.whl" % (p["name"], p["version"], _tag())
    di = _dist_info(p)
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:

        def add(arcname, data):
            z.writestr(zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0)), data)
            records.append("%s,%s,%d" % (arcname, _record_hash(data), len(data)))

        for arcname, data in entries:
            add(arcname, data)
        add(di + "/METADATA", meta.encode())
        add(di + "/WHEEL", _wheel_file().encode())
        records.append(di + "/RECORD,,")
        z.writestr(zipfile.ZipInfo(di + "/RECORD", date_time=(2020, 1, 1, 0, 0, 0)), "\n".join(records) + "\n")
    return name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    entries = []
    for full, arc in _files():
        with open(full, "rb") as f:
            entries.append((arc, f.read()))
    return _write_wheel(wheel_directory, entries)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    pth = (os.path.join(ROOT, "src") + "\n").encode()
    return _write_wheel(wheel_directory, [("__editable__.stratafs.pth", pth)])


def build_sdist(sdist_directory, config_settings=None):
    p, meta = _metadata()
    base = "%s-%s" % (p["name"], p["version"])
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ["pyproject.toml", "README.md", "_build/stratafs_build.py"]:
            full = os.path.join(ROOT, rel)
            if os.path.exists(full):
                t.add(full, arcname=base + "/" + rel)
        for full, arc in _files():
            t.add(full, arcname=base + "/src/" + arc)
        info = tarfile.TarInfo(base + "/PKG-INFO")
        data = meta.encode()
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return name
