#!/usr/bin/env python3
"""Independent golden values for simic's reward functions.

Written from esper-reference.md section 5.6 alone (not from the Go code) so
TestRewardGoldenFile checks the Go implementation against a second reading
of the specification. Regenerate with:

    python3 simic/testdata/reward_golden.py > simic/testdata/reward_golden.json

Stages use leyline's integers: DORMANT 1, GERMINATED 2, TRAINING 3,
BLENDING 4, HOLDING 6, FOSSILIZED 7. Ops: WAIT 0, GERMINATE 1,
SET_ALPHA_TARGET 2, PRUNE 3, FOSSILIZE 4, ADVANCE 5.
"""
import json
import math

GAMMA = 0.995
POT = {2: 1.0, 3: 2.0, 4: 3.5, 6: 5.5, 7: 6.0}
WAIT, GERM, SETA, PRUNE, FOSS, ADV = range(6)
BLEND, HOLD, TRAIN, FOSSIL, GERMINATED = 4, 6, 3, 7, 2


def phi(stage, eis):
    return POT.get(stage, 0.0) + min(0.3 * eis, 2.0)


def pbrs(seed):
    cur = phi(seed["stage"], seed["eis"])
    if seed["eis"] == 0:
        prev = phi(seed.get("prev_stage", 0), seed.get("prev_eis", 0))
    else:
        prev = phi(seed["stage"], seed["eis"] - 1)
    return 0.3 * (GAMMA * cur - prev)


def timing(ge):
    return 1.0 if ge >= 10 else 0.4 + 0.6 * max(ge, 0) / 10


def shaped(x):
    t = dict.fromkeys(
        "attribution ratio_penalty blending_warning holding_warning pbrs synergy rent "
        "alpha_shock occupancy fossil_maintenance action_shaping action_pbrs "
        "intervention_cost fossilize_bonus terminal".split(), 0.0)
    op, s = x["op"], x.get("seed")
    c = s.get("c") if s else None
    cf = s.get("cf") if s else None
    fossil = s is not None and s["stage"] == FOSSIL
    disc, rp = 1.0, 0.0
    if c is not None:
        if cf < 0:
            disc = 1 / (1 + math.exp(-3 * cf))
        if c > 1 and disc >= 0.5:
            if cf > 0.1:
                if c / cf > 5:
                    rp = -min(0.3, 0.1 * (c / cf - 5) / 5)
            else:
                rp = -0.3 * min(1, c / 10)
    prog = x["val_acc"] - x["acc_germ"] if "acc_germ" in x else None
    a = 0.0
    if s is not None and not fossil:
        if c is not None:
            if c < 0:
                a = c
            else:
                if prog is None:
                    v = 0.5 * c
                elif prog <= 0:
                    v = 0.0
                elif c >= prog:
                    v = 2 * prog * c / (prog + c)
                else:
                    v = c
                a = v * disc * timing(x["epoch"] - s["age"])
        elif s["stage"] in (BLEND, HOLD) and s.get("isss", 0) > 0:
            a = 0.3 * s["isss"]
    if op == FOSS and cf is not None and cf < 0:
        a = 0.0
    if op == PRUNE:
        a = -a
    t["attribution"] = a
    if not fossil:
        t["ratio_penalty"] = rp
    b = t["attribution"] + t["ratio_penalty"]
    if s and s["stage"] == BLEND and cf is not None and cf < 0:
        t["blending_warning"] = -0.1 - min(0.05 * s["eis"], 0.3)
    if s and s["stage"] == HOLD and op not in (FOSS, PRUNE) and s["eis"] >= 2 and b > 0:
        t["holding_warning"] = -min(0.1 + 0.05 * max(0, s["eis"] - 2), 0.3)
    if s:
        t["pbrs"] = pbrs(s)
    if s and disc >= 0.5 and b > 0 and s.get("isum", 0) > 0:
        t["synergy"] = 0.1 * math.tanh(0.5 * s["isum"])
    host, eff = x.get("host", 0), x.get("eff", 0.0)
    if host > 0 and eff > 0:
        t["rent"] = -min(0.5 * math.log(1 + eff / max(host, 200)), 1.5)
    if x.get("dalpha", 0) > 0:
        t["alpha_shock"] = max(-0.1958 * x["dalpha"], -1.0)
    na, nf = x.get("n_active", 0), x.get("n_fossil", 0)
    t["occupancy"] = -0.01 * max(0, na + nf - 1)
    t["fossil_maintenance"] = -0.002 * nf
    if op == GERM:
        if s:
            t["action_shaping"] = -0.3
        elif x["epoch"] < x["max_epochs"]:
            t["action_pbrs"] = 0.3 * (GAMMA * 1.0 - 0) * timing(x["epoch"])
        t["intervention_cost"] = -0.15
    elif op == FOSS:
        if not s or s["stage"] != HOLD:
            sh = -1.0
        elif cf is not None and cf < 0:
            sh = -0.5 - min(0.2 * abs(cf), 1.0)
            if c is not None and c > 0.1 and cf < -0.2:
                sh -= 0.3
        elif c is not None and c >= 1:
            sh = (0.5 + 0.1 * c) * min(1, s["eis"] / 5)
        else:
            sh = -0.2
        t["action_shaping"] = sh
        t["intervention_cost"] = -0.01
        if s and s["stage"] == HOLD and cf is not None and cf >= 0 and c is not None and c >= 1:
            t["fossilize_bonus"] = 3 * math.tanh(1 / 3) * min(1, s["eis"] / 5)
    elif op == PRUNE:
        if s:
            t["action_pbrs"] = 0.3 * (0 - phi(s["stage"], s["eis"]))
        if not s:
            sh = -0.2
        elif s["stage"] == FOSSIL:
            sh = -1.0
        elif s["age"] < 5:
            sh = -0.3 * (5 - s["age"])
        elif c is None:
            sh = 0.0
        elif c < -0.5:
            sh = -0.1 if s["age"] < 3 else 0.15
        elif c < 0:
            sh = 0.1
        else:
            sh = max(-0.3 - 0.05 * c, -0.9)
        t["action_shaping"] = sh
        t["intervention_cost"] = -0.005
    elif op == ADV:
        if s and s["stage"] == TRAIN:
            t["action_shaping"] = -0.1
    elif op == SETA:
        t["intervention_cost"] = -0.005
    if x["epoch"] == x["max_epochs"]:
        t["terminal"] = 0.05 * x["val_acc"]
    return t


def seed(stage, eis, age, c=None, cf=None, **kw):
    d = {"stage": stage, "eis": eis, "age": age}
    if c is not None:
        d["c"] = c
    if cf is not None:
        d["cf"] = cf
    d.update(kw)
    return d


CASES = [
    # name, inputs
    ("wait_training_measured_harmonic",
     dict(op=WAIT, seed=seed(TRAIN, 3, 12, c=4.0, cf=3.0), val_acc=62.0, acc_germ=60.0,
          epoch=20, max_epochs=150, host=10000, eff=0.0, n_active=1)),
    ("wait_blending_early_germination_ratio_penalty",
     dict(op=WAIT, seed=seed(BLEND, 4, 6, c=8.0, cf=1.0, isum=1.2), val_acc=70.0, acc_germ=65.0,
          epoch=8, max_epochs=150, host=20000, eff=3000.0, dalpha=0.05, n_active=2, n_fossil=1)),
    ("wait_blending_negative_total",
     dict(op=WAIT, seed=seed(BLEND, 3, 9, c=0.4, cf=-0.3), val_acc=55.0, acc_germ=56.0,
          epoch=30, max_epochs=150, host=5000, eff=800.0, n_active=1)),
    ("wait_holding_warning",
     dict(op=WAIT, seed=seed(HOLD, 4, 20, c=1.5, cf=2.0), val_acc=80.0, acc_germ=75.0,
          epoch=40, max_epochs=150, host=50000, eff=1500.0, n_active=1)),
    ("wait_safe_threshold_penalty_unknown_progress",
     dict(op=WAIT, seed=seed(TRAIN, 2, 15, c=3.0, cf=0.05), val_acc=50.0,
          epoch=25, max_epochs=150)),
    ("proxy_path_holding",
     dict(op=SETA, seed=seed(HOLD, 0, 18, prev_stage=BLEND, prev_eis=6, isss=1.5), val_acc=66.0,
          epoch=30, max_epochs=150, host=100, eff=150.0, n_active=3)),
    ("germinate_empty_early",
     dict(op=GERM, val_acc=40.0, epoch=4, max_epochs=150, host=10000, n_active=1)),
    ("germinate_occupied",
     dict(op=GERM, seed=seed(TRAIN, 2, 6), val_acc=40.0, epoch=12, max_epochs=150)),
    ("fossilize_good_partial_legitimacy",
     dict(op=FOSS, seed=seed(HOLD, 3, 25, c=2.5, cf=3.0), val_acc=82.0, acc_germ=78.0,
          epoch=50, max_epochs=150, host=30000, eff=900.0, n_active=1, n_fossil=1)),
    ("fossilize_ransomware",
     dict(op=FOSS, seed=seed(HOLD, 6, 25, c=2.0, cf=-1.5), val_acc=70.0, acc_germ=71.0,
          epoch=60, max_epochs=150)),
    ("fossilize_invalid_stage",
     dict(op=FOSS, seed=seed(BLEND, 2, 12, c=2.0, cf=1.0), val_acc=70.0, acc_germ=68.0,
          epoch=60, max_epochs=150)),
    ("prune_toxic",
     dict(op=PRUNE, seed=seed(BLEND, 5, 11, c=-2.0, cf=-1.0), val_acc=60.0, acc_germ=61.0,
          epoch=30, max_epochs=150)),
    ("prune_good_seed",
     dict(op=PRUNE, seed=seed(HOLD, 7, 30, c=4.0, cf=4.5), val_acc=75.0, acc_germ=70.0,
          epoch=45, max_epochs=150, host=10000, eff=500.0, n_active=2)),
    ("prune_young",
     dict(op=PRUNE, seed=seed(GERMINATED, 1, 2), val_acc=50.0, epoch=10, max_epochs=150)),
    ("advance_from_training_terminal",
     dict(op=ADV, seed=seed(TRAIN, 10, 12), val_acc=77.0, epoch=150, max_epochs=150,
          host=1000, eff=5000000.0, dalpha=9.0, n_active=2, n_fossil=2)),
    ("wait_fossilized_terminal",
     dict(op=WAIT, seed=seed(FOSSIL, 12, 40, c=3.0, cf=0.05), val_acc=85.0, acc_germ=70.0,
          epoch=150, max_epochs=150, host=10000, eff=2000.0, n_fossil=1)),
]


def main():
    out = []
    for name, x in CASES:
        t = shaped(x)
        out.append({"name": name, "inputs": x, "terms": t, "total": sum(t.values())})
    print(json.dumps(out, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
