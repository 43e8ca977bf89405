"""The report's figures as PNGs (matplotlib, Agg) for e-mail and printing, drawn from the same pandas frames as the
interactive ones; time axes through matplotlib's ConciseDateFormatter (``19:26:05``, never ``19:26.300000``)."""

from __future__ import annotations

from typing import Callable

from amqplens.explore import time_axis
from amqplens.report.data import OUTCOME_BAD


def figure(size: tuple[float, float]):
    """A matplotlib figure outside pyplot's global state; ``savefig`` writes PNGs with Agg. Draw one figure at a time:
    matplotlib's mathtext parser (log-axis labels) is shared by every figure of the process."""
    from matplotlib.figure import Figure

    # laid out at the dpi it is saved at: at 100 dpi, matplotlib's default, tight_layout measured the timeline's 6 pt
    # labels narrower than the 90 dpi PNG draws them (glyphs are hinted to whole pixels), and cut their first letters
    return Figure(figsize=size, dpi=DPI)


DPI = 90


def preload() -> None:
    """Import what drawing needs (the PNG process does, before it forks its drawing processes)."""
    import matplotlib.backends.backend_agg  # noqa: F401
    import matplotlib.figure  # noqa: F401
    import pandas  # noqa: F401


def draw(kind: str, args: tuple, title: str, size: tuple[float, float], path: str) -> None:
    """One PNG: ``<kind>(ax, *args)`` of this module (``latency``, ``steps``, ``outcomes``, ``timeline``) titled
    ``title``, written to ``path``; on the driver's draw thread or in a PNG process (amqplens/report/painter.py)."""
    fig = figure(size)
    ax = fig.subplots()
    DRAWINGS[kind](ax, *args)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)


def plain_log(axis) -> None:
    """A log (or symlog) axis labelled as plain numbers (``0.1``, ``1``, ``1,000``), not as mathtext powers
    (``10^3``): the same ticks labelled (matplotlib's rules: decades, and the minor ticks when few decades show);
    parsing and laying out the mathtext labels was about a tenth of the PNGs' drawing time."""
    from matplotlib.ticker import LogFormatter

    class Plain(LogFormatter):
        def _num_to_string(self, x, vmin, vmax):
            return f"{x:,.0f}" if x >= 1 else f"{x:g}"

    axis.set_major_formatter(Plain())
    axis.set_minor_formatter(Plain(labelOnlyBase=False))


def empty(ax, what: str) -> bool:
    ax.text(0.5, 0.5, f"no {what} in this lake", ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
    return False


def latency(ax, stats) -> bool:
    if stats.empty:
        return empty(ax, "latencies")
    boxes = [dict(label=r.what, whislo=r.min, q1=r.q1, med=r.median, q3=r.q3, whishi=r.p99, fliers=[r.max])
             for r in stats.itertuples()]
    ax.bxp(boxes, orientation="horizontal", showfliers=True)
    ax.set_xscale("log")
    plain_log(ax.xaxis)
    ax.set_xlabel("milliseconds (log scale); whiskers min .. p99, dot: max")
    return True


def steps(ax, pdf, labels: dict, key, value: str, ylabel: str, limit: str | None = None, log: bool = False) -> bool:
    if pdf.empty:
        return empty(ax, f"{value} series")
    pdf = pdf.assign(_entity=[key(r) for r in pdf.itertuples()])
    for entity, g in pdf.groupby("_entity", sort=False):
        name = labels.get(entity, entity)
        line = ax.step(g.ts, g[value], where="post", label=f"{name} {value}")
        if limit is not None and (g[limit].fillna(0) > 0).any():
            ax.step(g.ts, g[limit], where="post", linestyle="--", color=line[0].get_color(), label=f"{name} {limit}")
    if log:
        ax.set_yscale("symlog")
        plain_log(ax.yaxis)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=6)
    time_axis(ax)
    return True


def outcomes(ax, pdf) -> bool:
    if pdf.empty:
        return empty(ax, "deliveries")
    ax.barh([f"{r.dialect} {r.direction} {r.value}" for r in pdf.itertuples()], pdf.n,
            color=["tab:red" if v in OUTCOME_BAD else "tab:green" for v in pdf.value])
    ax.set_xscale("log")
    plain_log(ax.xaxis)
    ax.set_xlabel("messages (log scale); red: negative outcomes")
    return True


def timeline(ax, conns, errs, spans, events, alarms) -> bool:
    if conns.empty:
        return empty(ax, "connections")
    y_of = {cid: y for y, cid in enumerate(conns.connection_id)}
    # one collection of bars each (not a line per connection: 60 connections' lines were a tenth of the figure's time);
    # a bar at least 1/250 of the time axis long: a connection of a few milliseconds in a capture of minutes was
    # narrower than a pixel, and not drawn at all
    shortest = (conns.end_ts.max() - conns.start_ts.min()) / 250
    ends = conns.end_ts.where(conns.end_ts - conns.start_ts >= shortest, conns.start_ts + shortest)
    ax.hlines(range(len(conns)), conns.start_ts, ends, color="tab:blue", linewidth=4, capstyle="butt")
    if spans:
        ax.hlines([y_of[cid] for cid, _, _, _ in spans], [s for _, s, _, _ in spans], [e for _, _, e, _ in spans],
                  color="tab:red", linewidth=8, capstyle="butt")
    ax.plot(errs.ts, errs.connection_id.map(y_of), linestyle="none", marker="x", color="tab:orange", markersize=9)
    from amqplens.report.logs import draw_broker_events

    logged = draw_broker_events(ax, conns, events, alarms)
    ax.set_yticks(range(len(conns)), list(conns.conn_label), fontsize=6)
    ax.invert_yaxis()
    time_axis(ax)
    ax.set_xlabel(ax.get_xlabel() + "; blue: open, red: blocked, x: error close" + ("; " + ", ".join(logged) if logged else ""))
    return True


DRAWINGS: dict[str, Callable[..., bool]] = {"latency": latency, "steps": steps, "outcomes": outcomes, "timeline": timeline}
