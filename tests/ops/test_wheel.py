"""The wheel `make dist` builds, installed into a fresh venv, finds its configuration and its data.

conf/ is not a package: the wheel carries it as data files (<prefix>/share/amqplens/conf). Bad
input tried: the working directory is an empty folder, so no source tree or conf/ next to it can
stand in for what the wheel installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.e2e

PROBE = """
import json, sys
import amqplens, amqplens.config, amqplens.session
conf = amqplens.config.load_config()
print(json.dumps({"amqplens": amqplens.__file__, "conf_dir": str(amqplens.config.CONF_DIR), "layers": conf.sources,
                  "master": conf["spark.master"], "log4j": str(amqplens.session.LOG4J),
                  "log4j_exists": amqplens.session.LOG4J.exists()}))
"""


@pytest.fixture(scope="module")
def installed(built_dist, tmp_path_factory):
    """A venv with only the wheel (no dependencies: those come from this venv on PYTHONPATH, after it)."""
    venv = tmp_path_factory.mktemp("wheel") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    (wheel,) = built_dist.glob("amqplens-*.whl")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", "--no-deps",
                    "--no-index", str(wheel)], check=True, capture_output=True, timeout=300)  # fmt: skip
    # this venv's site-packages reach amqplens only through its editable finder (a .pth, not read from PYTHONPATH)
    env = dict(os.environ, PYTHONPATH=sysconfig.get_paths()["purelib"])
    return venv, env


def test_the_installed_wheel_reads_its_own_conf_and_logging_config(installed, tmp_path):
    venv, env = installed
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.splitlines()[-1])
    assert got["amqplens"].startswith(str(venv)) and str(ROOT) not in got["amqplens"]  # the wheel's code, not the source tree
    assert got["conf_dir"] == str(venv / "share" / "amqplens" / "conf")
    assert got["layers"][0] == str(venv / "share" / "amqplens" / "conf" / "defaults.yaml")
    assert got["master"] == "local[*]" and got["log4j_exists"] and got["log4j"].startswith(str(venv))
    assert (venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" / "amqplens" / "data"
            / "demo.pcap").stat().st_size > 0  # fmt: skip


def test_the_installed_console_script_runs(installed, tmp_path):
    venv, env = installed
    proc = subprocess.run([str(venv / "bin" / "amqplens"), "--help"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ingest-captures" in proc.stdout and "demo" in proc.stdout


def test_the_wheel_installs_with_its_dependencies_into_an_empty_venv_and_runs_the_demo(built_dist, tmp_path):
    """What a user does: ``pip install amqplens-*.whl`` into a venv of its own (the dependencies from the index, as
    pyproject.toml declares them: a dependency only the source tree's venv happens to hold would fail here), then
    ``amqplens demo`` from an empty folder, no PYTHONPATH: the lake gets the demo's tables."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    (wheel,) = built_dist.glob("amqplens-*.whl")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=900)
    assert pip.returncode == 0, pip.stderr[-3000:]
    work = tmp_path / "empty"
    work.mkdir()
    run = subprocess.run([str(venv / "bin" / "amqplens"), "demo", "--lake", str(work / "lake"),
                          "--set", f"report.out={work / 'report'}"], env=env, cwd=work, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    from deltalake import DeltaTable

    from amqplens.decode import decode_capture

    frames = DeltaTable(str(work / "lake" / "frames")).to_pyarrow_table(columns=["frame_type"])
    # the installed wheel's ingest wrote the frames the source tree decodes from the same capture
    assert frames.num_rows == len(decode_capture(ROOT / "amqplens" / "data" / "demo.pcap").frames()) > 1000
    assert (work / "report" / "index.html").is_file() and "report:" in run.stdout
