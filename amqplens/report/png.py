"""The report's figures as PNGs (matplotlib, Agg) for e-mail and printing, drawn from the same pandas frames as the
interactive ones; time axes through matplotlib's ConciseDateFormatter (``19:26:05``, never ``19:26.300000``)."""

from __future__ import annotations

from amqplens.explore import time_axis
from amqplens.report.data import OUTCOME_BAD


def figure(size: tuple[float, float]):
    """A matplotlib figure outside pyplot's global state; ``savefig`` writes PNGs with Agg. Draw one figure at a time:
    matplotlib's mathtext parser (log-axis labels) is shared by every figure of the process."""
    from matplotlib.figure import Figure

    return Figure(figsize=size)


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
    ax.set_xlabel("messages (log scale); red: negative outcomes")
    return True


def timeline(ax, conns, errs, spans, events, alarms) -> bool:
    if conns.empty:
        return empty(ax, "connections")
    y_of = {c.connection_id: y for y, c in enumerate(conns.itertuples())}
    for c in conns.itertuples():
        ax.plot([c.start_ts, c.end_ts], [y_of[c.connection_id]] * 2, color="tab:blue", linewidth=4, solid_capstyle="butt")
    for cid, start, end, _ in spans:
        ax.plot([start, end], [y_of[cid]] * 2, color="tab:red", linewidth=8, solid_capstyle="butt")
    ax.plot(errs.ts, errs.connection_id.map(y_of), linestyle="none", marker="x", color="tab:orange", markersize=9)
    from amqplens.report.logs import draw_broker_events

    logged = draw_broker_events(ax, conns, events, alarms)
    ax.set_yticks(range(len(conns)), list(conns.conn_label), fontsize=6)
    ax.invert_yaxis()
    time_axis(ax)
    ax.set_xlabel(ax.get_xlabel() + "; blue: open, red: blocked, x: error close" + ("; " + ", ".join(logged) if logged else ""))
    return True
