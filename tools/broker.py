"""A private RabbitMQ node on loopback, run from a folder of its own.

Everything the node writes (cookie, config, mnesia, log, pid file) lives
under ``workdir``; it listens on 127.0.0.1 (and ::1 when the host has it)
only, with its own epmd on a private port, so it never touches a system
broker or another test's node.  See ``../shared/notes/rabbitmq-on-loopback.md``.

    with RabbitNode("/tmp/rmq", port=5672) as node:
        print(node.ctl("list_queues", "name", "messages"))
        print(node.log_path.read_text())

CLI: ``python tools/broker.py run WORKDIR [--port N]`` starts a node and
keeps it up until Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import time
from pathlib import Path

RABBIT_BIN = Path(os.environ.get("RABBITMQ_SCRIPTS_DIR", "/usr/lib/rabbitmq/bin"))
EPMD = os.environ.get("EPMD", "epmd")
LOOPBACK_ERL_ARGS = "-kernel inet_dist_use_interface {127,0,0,1}"
PLUGINS = ("rabbitmq_amqp1_0",)
START_TIMEOUT_S = 180


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        return s.connect_ex((host, port)) != 0


def has_ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def wait_for_port(port: int, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while port_is_free(port):
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited ({proc.returncode}) before port {port} opened")
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")
        time.sleep(0.05)


class RabbitNode:
    """One RabbitMQ node; ``start()``/``stop()`` or use it as a context manager.

    ``port`` is the AMQP port (tshark decodes AMQP by 5672, so fixtures use
    the default); the Erlang distribution port is ``port + 20000`` (RabbitMQ's
    own convention) and the private epmd listens on ``port + 21000``.
    """

    def __init__(self, workdir: str | os.PathLike, port: int = 5672,
                 name: str = "amqplens", ipv6: bool | None = None, tls=None, tls_port: int = 5671) -> None:
        self.workdir = Path(workdir).resolve()
        self.port = port
        self.tls = tls  # a tools.tls_session.TlsPki: a TLS listener on 127.0.0.1:tls_port with its server certificate
        self.tls_port = tls_port
        self.dist_port = port + 20000
        self.epmd_port = port + 21000
        self.nodename = f"{name}@localhost"
        self.ipv6 = has_ipv6_loopback() if ipv6 is None else ipv6
        self.home = self.workdir / "home"
        self.log_path = self.workdir / "log" / "rabbit.log"
        self.pid_file = self.workdir / "rabbit.pid"
        self.server_out = self.workdir / "log" / "server.stdout"
        self._server: subprocess.Popen | None = None
        self._epmd: subprocess.Popen | None = None

    # -- layout -----------------------------------------------------------

    @property
    def env(self) -> dict[str, str]:
        w = self.workdir
        env = {k: v for k, v in os.environ.items() if not k.startswith("RABBITMQ_")}
        env.update(
            HOME=str(self.home),
            RABBITMQ_NODENAME=self.nodename,
            RABBITMQ_CONF_ENV_FILE=str(w / "rabbitmq-env.conf"),
            RABBITMQ_CONFIG_FILE=str(w / "rabbitmq.conf"),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(w / "advanced.config"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(w / "enabled_plugins"),
            RABBITMQ_MNESIA_BASE=str(w / "mnesia"),
            RABBITMQ_PID_FILE=str(self.pid_file),
            RABBITMQ_LOGS=str(self.log_path),
            RABBITMQ_DIST_PORT=str(self.dist_port),
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=LOOPBACK_ERL_ARGS,
            RABBITMQ_CTL_ERL_ARGS=LOOPBACK_ERL_ARGS,
            ERL_EPMD_ADDRESS="127.0.0.1",
            ERL_EPMD_PORT=str(self.epmd_port),
        )
        return env

    def _write_layout(self) -> None:
        w = self.workdir
        for d in (w, self.home, w / "mnesia", self.log_path.parent):
            d.mkdir(parents=True, exist_ok=True)
        self.home.chmod(0o700)
        cookie = self.home / ".erlang.cookie"
        if not cookie.exists():
            cookie.write_text(secrets.token_hex(16).upper())
        cookie.chmod(0o600)
        listeners = [f"listeners.tcp.1 = 127.0.0.1:{self.port}"]
        if self.ipv6:
            listeners.append(f"listeners.tcp.2 = ::1:{self.port}")
        if self.tls is not None:
            listeners += [f"listeners.ssl.default = 127.0.0.1:{self.tls_port}",
                          f"ssl_options.cacertfile = {Path(self.tls.ca_cert).resolve()}",
                          f"ssl_options.certfile = {Path(self.tls.server_cert).resolve()}",
                          f"ssl_options.keyfile = {Path(self.tls.server_key).resolve()}",
                          "ssl_options.verify = verify_none", "ssl_options.fail_if_no_peer_cert = false",
                          "ssl_options.versions.1 = tlsv1.3", "ssl_options.versions.2 = tlsv1.2"]
        (w / "rabbitmq.conf").write_text("\n".join(listeners + [
            "amqp1_0.default_user = guest",
            # a nearly full CI disk must not block publishers
            "disk_free_limit.absolute = 1MB",
            "log.console = false",
            "log.file.level = info",
        ]) + "\n")
        (w / "advanced.config").write_text("[].\n")
        (w / "rabbitmq-env.conf").write_text("")  # shadow /etc/rabbitmq/rabbitmq-env.conf
        # what `rabbitmq-plugins --offline enable` writes, without booting a VM
        (w / "enabled_plugins").write_text(f"[{','.join(PLUGINS)}].\n")

    # -- lifecycle --------------------------------------------------------

    def start(self) -> "RabbitNode":
        for port in (self.port, self.tls_port) if self.tls is not None else (self.port,):
            if not port_is_free(port):
                raise RuntimeError(f"127.0.0.1:{port} is already in use")
        self._write_layout()
        self.pid_file.unlink(missing_ok=True)
        env = self.env
        if port_is_free(self.epmd_port):
            self._epmd = subprocess.Popen(
                [EPMD, "-port", str(self.epmd_port), "-address", "127.0.0.1"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True)
            wait_for_port(self.epmd_port, 10, self._epmd)
        out = open(self.server_out, "ab")
        self._server = subprocess.Popen(
            [str(RABBIT_BIN / "rabbitmq-server")], env=env, cwd=self.workdir,
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        out.close()
        try:
            self.ctl("wait", "--timeout", str(START_TIMEOUT_S), str(self.pid_file),
                     timeout=START_TIMEOUT_S + 30)
            self.ctl("await_startup", timeout=START_TIMEOUT_S)
            wait_for_port(self.port, 30, self._server)
            if self.tls is not None:
                wait_for_port(self.tls_port, 30, self._server)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self._server is not None:
            if self._server.poll() is None:
                try:
                    self.ctl("stop", str(self.pid_file), timeout=60)
                except (subprocess.SubprocessError, OSError):
                    pass
            self._terminate(self._server, grace=30)
            self._server = None
        if self._epmd is not None:
            self._terminate(self._epmd, grace=0)
            self._epmd = None

    @staticmethod
    def _terminate(proc: subprocess.Popen, grace: float) -> None:
        """End a process we started, with its session (beam's helper children)."""
        for sig, wait in ((None, grace), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            if sig is not None:
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    pass
            try:
                proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def __enter__(self) -> "RabbitNode":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- tools ------------------------------------------------------------

    def ctl(self, *args: str, timeout: float = 60, tool: str = "rabbitmqctl") -> str:
        """Run rabbitmqctl (or another CLI tool) quietly against this node; stdout."""
        cmd = [str(RABBIT_BIN / tool), "-q", "-n", self.nodename, *args]
        res = subprocess.run(cmd, env=self.env, capture_output=True, text=True,
                             timeout=timeout)
        if res.returncode != 0:
            raise subprocess.CalledProcessError(res.returncode, cmd, res.stdout, res.stderr)
        return res.stdout

    def versions(self) -> dict[str, str]:
        out = self.ctl("eval", "{ok, V} = application:get_key(rabbit, vsn), "
                               "io:format(\"~s ~s~n\", [V, erlang:system_info(otp_release)]).")
        rabbit, otp = out.splitlines()[0].split()
        return {"rabbitmq": rabbit, "otp": otp}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="start a node and keep it up until Ctrl-C")
    run.add_argument("workdir")
    run.add_argument("--port", type=int, default=5672, help="AMQP port (default 5672)")
    run.add_argument("--name", default="amqplens", help="node name before @localhost")
    args = ap.parse_args(argv)
    # started in the background, a shell leaves SIGINT ignored: take TERM too
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with RabbitNode(args.workdir, port=args.port, name=args.name) as node:
        print(f"{node.nodename} on 127.0.0.1:{node.port}; log {node.log_path}", flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
