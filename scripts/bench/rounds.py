"""Shared by the bench scripts' summaries (their Python heredocs import it, run from the
repository root): floodgate's CPU per request over interleaved rounds of named runs."""
import json


def cpu_per_request(cpu_file, json_file, names, rounds, field):
    """CPU microseconds per request, and the tenant summaries, of each run name in rounds 1..rounds.

    cpu_file has a line "NAME-ROUND TICKS_BEFORE TICKS_AFTER" a run (lib.sh's bench_cpu_run;
    ticks of 1/100 s); json_file.format(NAME, ROUND) is that run's floodgate-load --json summary,
    whose first tenant's `field` (requests/s) times the run's duration counts the requests.
    Returns (us, tenants): by name, one entry a round."""
    cpu = {l.split()[0]: (float(l.split()[1]), float(l.split()[2])) for l in open(cpu_file)}
    us, tenants = {n: [] for n in names}, {n: [] for n in names}
    for r in range(1, rounds + 1):
        for n in names:
            d = json.load(open(json_file.format(n, r)))
            t = d["tenants"][0]
            done = t[field] * d["duration_secs"]
            c0, c1 = cpu[f"{n}-{r}"]
            us[n].append((c1 - c0) / 100 / done * 1e6)
            tenants[n].append(t)
    return us, tenants
