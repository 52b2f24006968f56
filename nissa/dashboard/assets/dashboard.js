// esper dashboard: reads the server's event stream (/api/events) and draws
// the runs with hand-written SVG. No framework, no build step. Everything
// shown comes from the telemetry events (leyline's JSON); text from a run
// is always set as text, never parsed as HTML.
'use strict';
(() => {
  const SVGNS = 'http://www.w3.org/2000/svg';
  const RUN_COLORS = ['#1f6fd1', '#d1452f', '#2a9d55', '#8e44ad', '#b7791f', '#17a2b8', '#c2185b', '#5d6d7e'];
  const HEAD_COLORS = ['#1f6fd1', '#d1452f', '#2a9d55', '#8e44ad', '#b7791f', '#17a2b8', '#c2185b', '#5d6d7e'];
  const STAGE_COLORS = {
    DORMANT: '#cfd6e0', GERMINATED: '#8bc34a', TRAINING: '#42a5f5', BLENDING: '#ab47bc',
    HOLDING: '#ffa726', FOSSILIZED: '#546e7a', PRUNED: '#e53935', EMBARGOED: '#9e9e9e',
    RESETTING: '#bdbdbd', UNKNOWN: '#cfd6e0',
  };
  const MARKS = {
    germinate: { color: '#2e7d32', label: 'germinate' },
    fossilize: { color: '#37474f', label: 'fossilize' },
    prune: { color: '#c62828', label: 'prune' },
    rollback: { color: '#ef6c00', label: 'rollback' },
  };
  const KIND_COLORS = {
    GERMINATE: '#2e7d32', ADVANCE: '#1565c0', FOSSILIZE: '#37474f', PRUNE: '#c62828',
    REFUSED: '#ad1457', ROLLBACK: '#ef6c00', RESUME: '#5d6d7e', INITIATED: '#5d6d7e', WAIT: '#5d6d7e',
  };
  const HEADS = ['slot', 'blueprint', 'style', 'tempo', 'alpha_target', 'alpha_speed', 'alpha_curve', 'op'];

  // state is the page's model; tests read it as window.esperDash.
  const state = {
    title: 'esper', runs: new Map(), order: [], connection: 'connecting', live: false,
    historyEvents: 0, liveEvents: 0, resets: 0, renders: 0, renderMs: 0,
  };
  window.esperDash = state;

  // ---- DOM helpers ----------------------------------------------------
  function h(tag, props, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('data-') || k === 'title' || k === 'href' || k === 'aria-label') e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const kid of kids.flat()) {
      if (kid === null || kid === undefined) continue;
      e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return e;
  }
  function s(tag, attrs, ...kids) {
    const e = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null) e.setAttribute(k, v);
    }
    for (const kid of kids.flat()) {
      if (kid === null || kid === undefined) continue;
      e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return e;
  }
  const finite = (v) => typeof v === 'number' && Number.isFinite(v);
  // fixed formats a value with d decimals; num a figure compactly.
  const fixed = (v, d) => (finite(v) ? v.toFixed(d) : '–');
  function num(v, digits = 3) {
    if (!finite(v)) return '–';
    const a = Math.abs(v);
    if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(2);
    return String(Number(v.toFixed(a >= 100 ? 1 : digits)));
  }
  // tickLabel formats an axis tick with the decimals its step needs.
  function tickLabel(v, step) {
    if (Math.abs(v) >= 1e5 || (v !== 0 && Math.abs(v) < 1e-3)) return v.toExponential(1);
    return v.toFixed(Math.max(0, Math.min(6, -Math.floor(Math.log10(step) + 1e-9))));
  }
  const signed = (v, d = 2) => (finite(v) ? (v >= 0 ? '+' : '') + v.toFixed(d) : '–');
  function duration(ms) {
    if (!finite(ms) || ms < 0) return '–';
    const sec = Math.round(ms / 1000);
    if (sec < 60) return sec + 's';
    if (sec < 3600) return Math.floor(sec / 60) + 'm' + String(sec % 60).padStart(2, '0') + 's';
    return Math.floor(sec / 3600) + 'h' + String(Math.floor(sec / 60) % 60).padStart(2, '0') + 'm';
  }

  // ---- the model: events → runs ---------------------------------------
  function newRun(info, index) {
    return {
      info, index, color: RUN_COLORS[index % RUN_COLORS.length],
      kind: info.kind || '', ended: !info.live, events: 0,
      epochs: new Map(), // epoch → {epoch, t, trainLoss, valLoss, trainAcc, valAcc, latencyMs}
      lastEpoch: 0,
      seeds: new Map(), // seed id → seed
      slotSeeds: new Map(), // slot → [seed ids], oldest first
      markers: [], // {epoch, kind, slot, text}
      log: [], // {epoch, kind, slot, text}
      rounds: new Map(), // round → {round, t, ret, kl, ev, eps, pl, vl, rollbacks, entropy}
      lastRound: 0,
      passedGate: new Map(), // slot → message of the latest passed gate
      pendingGates: new Map(), // seed id → gates evaluated before its germination (G0)
    };
  }

  function seedOf(run, e, epoch) {
    const slot = e.slot_id || (e.data && e.data.slot_id) || '?';
    let id = e.seed_id;
    if (!id) {
      const ids = run.slotSeeds.get(slot);
      id = ids && ids.length ? ids[ids.length - 1] : slot + '@' + epoch;
    }
    let seed = run.seeds.get(id);
    if (!seed) {
      seed = {
        id, slot, blueprint: '', stage: 'DORMANT', alpha: 0, alphaEpoch: 0, params: null,
        improvement: null, counterfactual: null, segments: [], alphaPts: new Map(), gates: new Map(),
        born: epoch, ended: null, reason: '', outcome: '',
      };
      if (run.pendingGates.has(id)) {
        seed.gates = run.pendingGates.get(id);
        run.pendingGates.delete(id);
      }
      run.seeds.set(id, seed);
      if (!run.slotSeeds.has(slot)) run.slotSeeds.set(slot, []);
      run.slotSeeds.get(slot).push(id);
    }
    return seed;
  }

  function setStage(seed, stage, epoch) {
    if (seed.stage === stage && seed.segments.length) return;
    seed.stage = stage;
    seed.segments.push({ stage, from: epoch });
  }

  function setAlpha(seed, alpha, epoch) {
    if (!finite(alpha)) return;
    seed.alpha = alpha;
    seed.alphaEpoch = epoch;
    seed.alphaPts.set(epoch, alpha);
  }

  // takeGate returns (and forgets) the message of the gate a slot last
  // passed: the reason of the transition that follows it.
  function takeGate(run, slot) {
    const m = run.passedGate.get(slot);
    run.passedGate.delete(slot);
    return m;
  }

  function addLog(run, epoch, kind, slot, text) {
    run.log.push({ epoch, kind, slot: slot || '', text });
  }

  function metricMap(list) {
    const m = new Map();
    for (const x of list || []) m.set(x.name, x);
    return m;
  }

  function apply(run, e) {
    run.events++;
    const d = e.data || {};
    const t = Date.parse(e.timestamp);
    // Seed events carry no epoch: they happen in the decision step of
    // the epoch after the last one completed.
    const cur = run.lastEpoch + 1;
    const epoch = Number.isInteger(e.epoch) ? e.epoch : cur;
    switch (e.event_type) {
      case 'EPOCH_COMPLETED': {
        run.kind = run.kind || 'train';
        const ep = Number.isInteger(e.epoch) ? e.epoch : d.inner_epoch;
        const row = run.epochs.get(ep) || { epoch: ep };
        Object.assign(row, { t, trainLoss: d.train_loss, valLoss: d.val_loss, trainAcc: d.train_accuracy, valAcc: d.val_accuracy });
        run.epochs.set(ep, row);
        run.lastEpoch = Math.max(run.lastEpoch, ep);
        // Every seed still in a slot keeps its alpha on the curve.
        for (const seed of run.seeds.values()) {
          if (seed.ended === null && !seed.alphaPts.has(ep)) seed.alphaPts.set(ep, seed.alpha);
        }
        break;
      }
      case 'METRICS': {
        if (d.source === 'simic') { applyRound(run, e, d, t); break; }
        const ep = Number.isInteger(e.epoch) ? e.epoch : run.lastEpoch;
        for (const m of d.metrics || []) {
          if (m.name === 'tolaria.training.latency_ms') {
            const row = run.epochs.get(ep);
            if (row) row.latencyMs = m.value;
          } else if (m.name === 'tolaria.grad_agg.seed.alpha') {
            const id = m.attributes && m.attributes.seed_id;
            const seed = id && run.seeds.get(id);
            if (!seed) continue;
            // The alpha the epoch trained with; a lifecycle event of the
            // same epoch (after its training) is newer for the table.
            seed.alphaPts.set(ep, m.value);
            if (seed.alphaEpoch < ep) { seed.alpha = m.value; seed.alphaEpoch = ep; }
          }
        }
        break;
      }
      case 'SEED_GERMINATED': {
        const seed = seedOf(run, e, epoch);
        seed.blueprint = d.blueprint_id || seed.blueprint;
        seed.params = d.params;
        seed.born = epoch;
        setStage(seed, 'GERMINATED', epoch);
        setAlpha(seed, d.alpha || 0, epoch);
        run.markers.push({ epoch, kind: 'germinate', slot: seed.slot, text: `germinate ${seed.slot} ${seed.blueprint}` });
        const why = takeGate(run, seed.slot);
        addLog(run, epoch, 'GERMINATE', seed.slot,
          `${seed.slot} ${seed.blueprint} (${d.params} parameters; ${d.alpha_curve || 'LINEAR'} blend over ${d.blend_tempo_epochs} epochs)` + (why ? ` — ${why}` : ''));
        break;
      }
      case 'SEED_STAGE_CHANGED': {
        const seed = seedOf(run, e, epoch);
        setStage(seed, d.to_stage, epoch);
        if (d.to_stage === 'PRUNED') seed.outcome = 'pruned';
        if (d.to_stage === 'DORMANT') seed.gone = true; // the slot was reset: the seed is no more
        setAlpha(seed, d.alpha, epoch);
        if (finite(d.accuracy_delta)) seed.improvement = d.accuracy_delta;
        if (['EMBARGOED', 'RESETTING', 'DORMANT'].includes(d.to_stage)) {
          addLog(run, epoch, 'SLOT', seed.slot, `${seed.slot} ${d.from_stage} → ${d.to_stage}` + (d.to_stage === 'DORMANT' ? ': the slot is free again' : ''));
        } else if (d.to_stage !== 'FOSSILIZED' && d.to_stage !== 'PRUNED') {
          const why = takeGate(run, seed.slot);
          addLog(run, epoch, 'ADVANCE', seed.slot,
            `${seed.slot} ${d.from_stage} → ${d.to_stage} (α ${fixed(d.alpha, 2)}, accuracy ${signed(d.accuracy_delta)} since germination)` + (why ? ` — ${why}` : ''));
        }
        break;
      }
      case 'SEED_GATE_EVALUATED': {
        // G0 comes before its seed exists (and a failed G0 means it never
        // will): its result waits for the germination.
        const known = e.seed_id && run.seeds.get(e.seed_id);
        const slot = e.slot_id || d.slot_id || '?';
        let gates;
        if (known) {
          gates = known.gates;
        } else {
          if (!run.pendingGates.has(e.seed_id)) run.pendingGates.set(e.seed_id, new Map());
          gates = run.pendingGates.get(e.seed_id);
        }
        const seed = known || { slot };
        const g = gates.get(d.gate) || { gate: d.gate, passed: false, fails: 0, message: '' };
        g.passed = !!d.passed;
        g.message = d.message || e.message || '';
        if (!d.passed) g.fails++;
        gates.set(d.gate, g);
        if (d.passed) {
          run.passedGate.set(seed.slot, g.message);
        } else {
          run.passedGate.delete(seed.slot);
          addLog(run, epoch, 'REFUSED', seed.slot, `${seed.slot} → ${d.target_stage}: ${g.message}`);
        }
        break;
      }
      case 'SEED_FOSSILIZED': {
        const seed = seedOf(run, e, epoch);
        seed.blueprint = d.blueprint_id || seed.blueprint;
        setStage(seed, 'FOSSILIZED', epoch);
        seed.outcome = 'fossilized';
        setAlpha(seed, finite(d.alpha) ? d.alpha : 1, epoch);
        seed.improvement = d.improvement;
        if (finite(d.counterfactual)) seed.counterfactual = d.counterfactual;
        if (finite(d.params_added)) seed.params = d.params_added;
        run.markers.push({ epoch, kind: 'fossilize', slot: seed.slot, text: `fossilize ${seed.slot} ${seed.blueprint}` });
        const why = takeGate(run, seed.slot);
        addLog(run, epoch, 'FOSSILIZE', seed.slot,
          `${seed.slot} ${seed.blueprint}: accuracy ${signed(d.improvement)} since germination` +
          (finite(d.counterfactual) ? `, ${signed(d.counterfactual)} with it than without` : '') + (why ? ` — ${why}` : ''));
        break;
      }
      case 'SEED_PRUNED': {
        const seed = seedOf(run, e, epoch);
        setStage(seed, 'PRUNED', epoch);
        seed.outcome = 'pruned';
        setAlpha(seed, 0, epoch);
        seed.ended = epoch;
        seed.reason = d.reason || '';
        if (finite(d.improvement)) seed.improvement = d.improvement;
        if (finite(d.counterfactual)) seed.counterfactual = d.counterfactual;
        run.markers.push({ epoch, kind: 'prune', slot: seed.slot, text: `prune ${seed.slot}: ${d.reason}` });
        addLog(run, epoch, 'PRUNE', seed.slot, `${seed.slot} ${seed.blueprint}: ${d.reason}` + (d.initiator ? ` (by the ${d.initiator})` : ''));
        break;
      }
      case 'GOVERNOR_ROLLBACK': {
        run.markers.push({ epoch, kind: 'rollback', slot: '', text: `rollback: ${d.reason}` });
        const bits = [d.reason];
        if (d.panic_reason) bits.push(d.panic_reason);
        if (finite(d.loss_at_panic)) bits.push(`loss ${num(d.loss_at_panic)}`);
        addLog(run, epoch, 'ROLLBACK', '', bits.join(', '));
        break;
      }
      case 'MORPHOLOGY_CAUSAL_LOG': {
        const ep = finite(d.epoch) ? d.epoch : epoch;
        addLog(run, ep, d.op, d.slot_id, [d.slot_id, d.blueprint_id].filter(Boolean).join(' ') +
          (d.reason ? `: ${d.reason}` : '') + (d.success ? '' : ' → not applied'));
        break;
      }
      case 'TAMIYO_INITIATED':
        addLog(run, epoch, 'INITIATED', '', `the host has stabilised (${d.stable_count} stable epochs): germination allowed`);
        break;
      case 'CHECKPOINT_LOADED':
        addLog(run, epoch, 'RESUME', '', e.message || `resumed from ${d.path}`);
        break;
      case 'TRAINING_STARTED':
        run.started = d;
        break;
      default:
        if (e.severity === 'warning' || e.severity === 'error' || e.severity === 'critical' || /DETECTED|ANOMALY/.test(e.event_type)) {
          addLog(run, epoch, e.event_type.replace(/_DETECTED$/, ''), e.slot_id, e.message || (d.detail || ''));
        }
    }
  }

  function applyRound(run, e, d, t) {
    run.kind = run.kind || 'ppo';
    const m = metricMap(d.metrics);
    const match = /round (\d+)/.exec(e.message || '');
    const round = match ? Number(match[1]) : run.lastRound + 1;
    const v = (name) => (m.has(name) ? m.get(name).value : null);
    const entropy = {};
    for (const head of HEADS) entropy[head] = v('simic.ppo.entropy.' + head);
    run.rounds.set(round, {
      round, t, ret: v('simic.ppo.return_mean'), kl: v('simic.ppo.approx_kl'), ev: v('simic.ppo.explained_variance'),
      eps: v('simic.env_epochs_per_second'), pl: v('simic.ppo.policy_loss'), vl: v('simic.ppo.value_loss'),
      rollbacks: v('simic.rollbacks'), entropy,
    });
    run.lastRound = Math.max(run.lastRound, round);
  }

  // ---- progress ---------------------------------------------------------
  function progress(run) {
    const train = run.kind !== 'ppo';
    const rows = train ? [...run.epochs.values()] : [...run.rounds.values()];
    const key = train ? 'epoch' : 'round';
    rows.sort((a, b) => a[key] - b[key]);
    const done = train ? run.lastEpoch : run.lastRound;
    const total = run.info.total || 0;
    let per = null;
    if (rows.length >= 2) {
      const a = rows[0], b = rows[rows.length - 1];
      if (b[key] > a[key] && finite(a.t) && finite(b.t)) per = (b.t - a.t) / (b[key] - a[key]);
    }
    const unit = train ? 'epoch' : 'round';
    let state = 'finished';
    if (!run.ended) state = 'running';
    else if (total && done < total) state = 'stopped';
    let eta = null;
    if (state === 'running' && per !== null && total) eta = per * Math.max(0, total - done);
    return { done, total, per, unit, state, eta };
  }

  // ---- charts -------------------------------------------------------------
  function niceStep(span, n) {
    const raw = span / Math.max(1, n);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const f = raw / mag;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
  }
  function ticks(lo, hi, n) {
    const step = niceStep(hi - lo, n);
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    out.step = step;
    return out;
  }

  // lineChart draws series ({name, color, dashed, points: [[x, y]], run})
  // over [xMin, xMax] with vertical markers ({x, color, text, kind}).
  function lineChart(o) {
    const W = 560, H = 210, L = 50, R = 12, T = 10, B = 26;
    const fig = h('figure', { class: 'chart', 'data-chart': o.id });
    fig.append(h('h3', { text: o.title }));
    const pts = o.series.flatMap((se) => se.points.filter((p) => finite(p[0]) && finite(p[1])));
    if (!pts.length) {
      fig.append(h('p', { class: 'nodata', text: o.empty || 'no data yet' }));
      return fig;
    }
    let x0 = o.xMin ?? Math.min(...pts.map((p) => p[0]));
    let x1 = Math.max(o.xMax || 0, ...pts.map((p) => p[0]));
    if (x1 <= x0) x1 = x0 + 1;
    let y0 = Math.min(...pts.map((p) => p[1]));
    let y1 = Math.max(...pts.map((p) => p[1]));
    if (o.yMin !== undefined) y0 = Math.min(y0, o.yMin);
    if (o.yMax !== undefined) y1 = Math.max(y1, o.yMax);
    if (y1 - y0 < 1e-12) { y0 -= 0.5; y1 += 0.5; }
    const pad = (y1 - y0) * 0.06;
    if (o.yMin === undefined || y0 < o.yMin) y0 -= pad;
    if (o.yMax === undefined || y1 > o.yMax) y1 += pad;
    const X = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
    const Y = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
    const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': o.title });
    const yt = ticks(y0, y1, 4);
    for (const v of yt) {
      svg.append(s('line', { class: 'grid', x1: L, x2: W - R, y1: Y(v), y2: Y(v) }));
      svg.append(s('text', { x: L - 6, y: Y(v) + 4, 'text-anchor': 'end' }, tickLabel(v, yt.step)));
    }
    const xt = ticks(x0, x1, 6);
    for (const v of xt) {
      if (o.integerX && !Number.isInteger(v)) continue;
      svg.append(s('text', { x: X(v), y: H - 8, 'text-anchor': 'middle' }, o.integerX ? v.toFixed(0) : tickLabel(v, xt.step)));
    }
    svg.append(s('line', { class: 'axis', x1: L, x2: L, y1: T, y2: H - B }));
    svg.append(s('line', { class: 'axis', x1: L, x2: W - R, y1: H - B, y2: H - B }));
    for (const m of o.markers || []) {
      if (!finite(m.x) || m.x < x0 || m.x > x1) continue;
      svg.append(s('line', { class: 'mark', 'data-kind': m.kind, x1: X(m.x), x2: X(m.x), y1: T, y2: H - B, stroke: m.color },
        s('title', {}, `epoch ${m.x}: ${m.text}`)));
    }
    for (const se of o.series) {
      const p = se.points.filter((q) => finite(q[0]) && finite(q[1])).sort((a, b) => a[0] - b[0]);
      const attrs = { class: 'series', stroke: se.color, 'data-series': se.name, 'data-points': p.length, 'data-run': se.run };
      if (se.dashed) attrs['stroke-dasharray'] = '5 4';
      if (p.length === 1) {
        svg.append(s('circle', { ...attrs, class: 'series', cx: X(p[0][0]), cy: Y(p[0][1]), r: 2.5, fill: se.color }));
      } else if (p.length > 1) {
        attrs.d = p.map((q, i) => (i ? 'L' : 'M') + X(q[0]).toFixed(1) + ' ' + Y(q[1]).toFixed(1)).join('');
        svg.append(s('path', attrs));
      }
    }
    fig.append(svg);
    const legend = h('div', { class: 'legend' });
    for (const se of o.series) {
      if (!se.points.some((q) => finite(q[0]) && finite(q[1]))) continue;
      const sw = h('i', { class: se.dashed ? 'dashed' : '' });
      sw.style.borderTopColor = se.color;
      legend.append(h('span', {}, sw, se.name));
    }
    const kinds = new Set((o.markers || []).map((m) => m.kind));
    for (const k of kinds) {
      const sw = h('i', { class: 'dashed' });
      sw.style.borderTopColor = MARKS[k].color;
      legend.append(h('span', {}, sw, MARKS[k].label));
    }
    fig.append(legend);
    return fig;
  }

  function epochRows(run) {
    return [...run.epochs.values()].sort((a, b) => a.epoch - b.epoch);
  }
  function roundRows(run) {
    return [...run.rounds.values()].sort((a, b) => a.round - b.round);
  }
  function runMarkers(run) {
    return run.markers.map((m) => ({ x: m.epoch, kind: m.kind, color: MARKS[m.kind].color, text: `${run.info.label}: ${m.text}` }));
  }
  function epochSpan(runs) {
    return Math.max(1, ...runs.map((r) => Math.max(r.info.total || 0, r.lastEpoch)));
  }

  // timeline: one lane per slot, the seeds' stages as coloured spans, the
  // lifecycle events marked.
  function timeline(run) {
    const fig = h('figure', { class: 'timeline', 'data-run': run.info.id });
    fig.append(h('h3', { text: 'Lifecycle timeline' }));
    const slots = [...run.slotSeeds.keys()].sort();
    if (!slots.length) {
      fig.append(h('p', { class: 'nodata', text: 'no seed germinated yet' }));
      return fig;
    }
    const W = 560, L = 56, R = 12, T = 6, lane = 24, B = 22;
    const H = T + lane * slots.length + B;
    const x1 = Math.max(run.info.total || 0, run.lastEpoch, 1) + 1;
    const X = (x) => L + ((x - 1) / (x1 - 1)) * (W - L - R);
    const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'lifecycle timeline' });
    const end = run.lastEpoch + 1;
    slots.forEach((slot, i) => {
      const y = T + i * lane;
      svg.append(s('text', { class: 'lane-label', x: 4, y: y + lane / 2 + 4 }, slot));
      svg.append(s('line', { class: 'grid', x1: L, x2: W - R, y1: y + lane, y2: y + lane }));
      for (const id of run.slotSeeds.get(slot)) {
        const seed = run.seeds.get(id);
        seed.segments.forEach((seg, j) => {
          if (seg.stage === 'DORMANT') return; // an empty slot
          const next = seed.segments[j + 1];
          let to = next ? next.from : end;
          if (to <= seg.from) to = seg.from + 0.5;
          svg.append(s('rect', {
            class: 'seg', 'data-slot': slot, 'data-seed': id, 'data-stage': seg.stage,
            x: X(seg.from), y: y + 3, width: Math.max(1.5, X(to) - X(seg.from)), height: lane - 6,
            fill: STAGE_COLORS[seg.stage] || '#999',
          }, s('title', {}, `${id}: ${seg.stage} from epoch ${seg.from}`)));
        });
      }
    });
    for (const m of run.markers) {
      const rows = m.slot ? [slots.indexOf(m.slot)] : slots.map((_, i) => i);
      for (const i of rows) {
        if (i < 0) continue;
        const y = T + i * lane;
        const x = X(m.epoch);
        svg.append(s('path', {
          class: 'mark', 'data-kind': m.kind, d: `M${x - 4} ${y} L${x + 4} ${y} L${x} ${y + 6}Z`, fill: MARKS[m.kind].color, stroke: 'none',
        }, s('title', {}, `epoch ${m.epoch}: ${m.text}`)));
      }
    }
    for (const v of ticks(1, x1 - 1, 6)) {
      if (!Number.isInteger(v)) continue;
      svg.append(s('text', { x: X(v), y: H - 6, 'text-anchor': 'middle' }, v));
    }
    fig.append(svg);
    const legend = h('div', { class: 'legend' });
    const seen = new Set();
    for (const seed of run.seeds.values()) for (const seg of seed.segments) if (seg.stage !== 'DORMANT') seen.add(seg.stage);
    for (const st of Object.keys(STAGE_COLORS)) {
      if (!seen.has(st)) continue;
      const sw = h('i', { class: 'block' });
      sw.style.background = STAGE_COLORS[st];
      legend.append(h('span', {}, sw, st.toLowerCase()));
    }
    fig.append(legend);
    return fig;
  }

  function alphaChart(run) {
    const series = [...run.seeds.values()].map((seed, i) => ({
      name: seed.id, run: run.info.id, color: HEAD_COLORS[i % HEAD_COLORS.length],
      points: [...seed.alphaPts.entries()],
    }));
    return lineChart({
      id: 'alpha', title: 'Seed alpha', series, markers: runMarkers(run), xMin: 1, xMax: epochSpan([run]),
      yMin: 0, yMax: 1, integerX: true, empty: 'no seed yet',
    });
  }

  function seedTable(run) {
    const wrap = h('div', { class: 'panel' });
    wrap.append(h('h3', { text: 'Seeds' }));
    if (!run.seeds.size) {
      wrap.append(h('p', { class: 'nodata', text: 'no seed yet' }));
      return wrap;
    }
    const table = h('table', { class: 'seeds', 'data-run': run.info.id });
    table.append(h('thead', {}, h('tr', {}, ['slot', 'seed', 'blueprint', 'stage', 'α', 'params', 'contribution', 'gates'].map((c) => h('th', { text: c })))));
    const body = h('tbody');
    const seeds = [...run.seeds.values()].sort((a, b) => (a.slot < b.slot ? -1 : a.slot > b.slot ? 1 : a.born - b.born));
    for (const seed of seeds) {
      // A pruned seed whose slot was reset is gone: it shows as pruned.
      const shown = seed.gone ? 'PRUNED' : seed.stage;
      const stage = h('span', { class: 'stage', text: shown });
      stage.style.background = STAGE_COLORS[shown] || '#999';
      let contrib = '–', contribTitle = 'not measured yet';
      if (finite(seed.counterfactual)) {
        contrib = signed(seed.counterfactual) + ' pp';
        contribTitle = 'counterfactual: validation accuracy with the seed minus without, in points';
      } else if (finite(seed.improvement)) {
        contrib = signed(seed.improvement) + ' pp Δ';
        contribTitle = 'validation accuracy change since germination, in points';
      }
      const gates = h('td', { class: 'gates' });
      for (const g of [...seed.gates.values()].sort((a, b) => (a.gate < b.gate ? -1 : 1))) {
        const label = g.gate + (g.passed ? '✓' : '✗') + (g.fails && g.passed ? ` (${g.fails}✗)` : g.fails > 1 ? `×${g.fails}` : '');
        gates.append(h('span', { class: 'gate ' + (g.passed ? 'pass' : 'fail'), title: g.message, text: label }));
      }
      body.append(h('tr', { 'data-slot': seed.slot, 'data-seed': seed.id, 'data-stage': shown, 'data-outcome': seed.outcome },
        h('td', { text: seed.slot }), h('td', { text: seed.id }), h('td', { text: seed.blueprint || '–' }),
        h('td', { class: 'stage-cell' }, stage), h('td', { class: 'alpha', text: finite(seed.alpha) ? seed.alpha.toFixed(2) : '–' }),
        h('td', { class: 'params', text: seed.params ?? '–' }), h('td', { class: 'contribution', title: contribTitle, text: contrib }), gates));
    }
    table.append(body);
    wrap.append(table);
    if ([...run.seeds.values()].some((x) => x.reason)) {
      for (const seed of run.seeds.values()) {
        if (seed.reason) wrap.append(h('p', { class: 'nodata', text: `${seed.id} pruned: ${seed.reason}` }));
      }
    }
    return wrap;
  }

  function decisionLog(run) {
    const wrap = h('div', { class: 'panel' });
    wrap.append(h('h3', { text: 'Decisions and lifecycle' }));
    if (!run.log.length) {
      wrap.append(h('p', { class: 'nodata', text: 'nothing decided yet' }));
      return wrap;
    }
    const ol = h('ol', { class: 'log', 'data-run': run.info.id });
    const shown = run.log.slice(-400).reverse();
    for (const x of shown) {
      const kind = h('span', { class: 'kind', text: x.kind });
      kind.style.color = KIND_COLORS[x.kind] || '#39414f';
      ol.append(h('li', { 'data-kind': x.kind, 'data-slot': x.slot },
        h('span', { class: 'ep', text: 'ep ' + x.epoch }), kind, h('span', { class: 'text', text: x.text })));
    }
    wrap.append(ol);
    if (run.log.length > shown.length) wrap.append(h('p', { class: 'nodata', text: `the ${shown.length} newest of ${run.log.length}` }));
    return wrap;
  }

  // ---- rendering ----------------------------------------------------------
  function card(run) {
    const p = progress(run);
    const c = h('article', { class: 'card', 'data-run': run.info.id, 'data-state': p.state });
    const sw = h('span', { class: 'swatch' });
    sw.style.background = run.color;
    c.append(h('h2', {}, sw, run.info.label, h('span', { class: 'runstate ' + p.state, text: p.state })));
    const kind = run.kind === 'ppo' ? 'PPO run' : run.kind === 'train' ? 'training run' : 'run';
    c.append(h('div', { class: 'meta', text: `${kind}${run.info.dir ? ' · ' + run.info.dir : ''}` }));
    const bar = h('div', { class: 'bar' });
    const fill = h('div', { class: 'fill' });
    fill.style.width = p.total ? Math.min(100, (100 * p.done) / p.total).toFixed(1) + '%' : p.done ? '100%' : '0';
    fill.style.background = run.color;
    bar.append(fill);
    c.append(bar);
    const bits = [`${p.unit} ${p.done}${p.total ? '/' + p.total : ''}`];
    if (p.per !== null) bits.push(`${(p.per / 1000).toFixed(2)} s/${p.unit}`);
    if (p.state === 'running' && p.eta !== null) bits.push('ETA ' + duration(p.eta));
    if (p.state === 'stopped') bits.push(`stopped before its ${p.total} ${p.unit}s`);
    if (run.kind === 'train') {
      const last = run.epochs.get(run.lastEpoch);
      if (last) bits.push(`val acc ${fixed(last.valAcc, 2)}%`, `val loss ${fixed(last.valLoss, 4)}`);
    } else if (run.kind === 'ppo') {
      const last = run.rounds.get(run.lastRound);
      if (last) bits.push(`return ${signed(last.ret, 3)}`);
    }
    c.append(h('div', { class: 'progress', text: bits.join(' · ') }));
    const warns = [...(run.info.warnings || [])];
    if (run.info.history_dropped) warns.push(`the run's first ${run.info.history_dropped} events are no longer kept by the server: the curves start later`);
    c.append(h('ul', { class: 'warnings' }, warns.map((w) => h('li', { text: w }))));
    const cfg = run.info.config || {};
    const keys = Object.keys(cfg).sort();
    if (keys.length) {
      const det = h('details', {}, h('summary', { text: 'configuration' }));
      det.open = !!state.openConfig[run.info.id];
      det.addEventListener('toggle', () => { state.openConfig[run.info.id] = det.open; });
      det.append(h('table', {}, h('tbody', {}, keys.map((k) => h('tr', {}, h('td', { text: k }), h('td', { text: cfg[k] === '' ? '""' : cfg[k] }))))));
      c.append(det);
    }
    if (run.ended && run.info.dir) {
      const files = run.kind === 'ppo' ? ['ppo.png'] : ['training.png', 'alpha.png'];
      c.append(h('div', { class: 'files meta' }, 'plots: ', files.map((f) => h('a', { href: `/api/runs/${encodeURIComponent(run.info.id)}/files/${f}`, text: f }))));
    }
    return c;
  }

  function compareCharts(runs) {
    const out = [];
    const train = runs.filter((r) => r.kind === 'train');
    if (train.length) {
      const markers = train.flatMap(runMarkers);
      const xMax = epochSpan(train);
      const series = (key, dashed, suffix) => train.map((r) => ({
        name: r.info.label + suffix, run: r.info.id, color: r.color, dashed,
        points: epochRows(r).map((row) => [row.epoch, row[key]]),
      }));
      out.push(lineChart({
        id: 'accuracy', title: 'Accuracy (%)', xMin: 1, xMax, integerX: true, markers,
        series: [...series('valAcc', false, ' · val'), ...series('trainAcc', true, ' · train')],
      }));
      out.push(lineChart({
        id: 'loss', title: 'Loss', xMin: 1, xMax, integerX: true, markers,
        series: [...series('valLoss', false, ' · val'), ...series('trainLoss', true, ' · train')],
      }));
    }
    const ppo = runs.filter((r) => r.kind === 'ppo');
    if (ppo.length) {
      const xMax = Math.max(1, ...ppo.map((r) => Math.max(r.info.total || 0, r.lastRound)));
      const chart = (id, title, key) => lineChart({
        id, title, xMin: 1, xMax, integerX: true,
        series: ppo.map((r) => ({ name: r.info.label, run: r.info.id, color: r.color, points: roundRows(r).map((x) => [x.round, x[key]]) })),
      });
      out.push(chart('return', 'Return (mean episode reward)', 'ret'));
      out.push(chart('kl', 'KL divergence', 'kl'));
      out.push(chart('ev', 'Explained variance', 'ev'));
      out.push(chart('throughput', 'Env-epochs per second', 'eps'));
    }
    return out;
  }

  function column(run) {
    const col = h('div', { class: 'column', 'data-run': run.info.id });
    const sw = h('span', { class: 'swatch' });
    sw.style.background = run.color;
    col.append(h('h2', {}, sw, run.info.label));
    if (run.kind === 'ppo') {
      const rows = roundRows(run);
      col.append(lineChart({
        id: 'entropy', title: 'Entropy per action head', xMin: 1, xMax: Math.max(run.info.total || 0, run.lastRound), integerX: true,
        series: HEADS.map((head, i) => ({ name: head, run: run.info.id, color: HEAD_COLORS[i], points: rows.map((x) => [x.round, x.entropy[head]]) })),
      }));
      col.append(lineChart({
        id: 'ppo-loss', title: 'Policy and value loss', xMin: 1, xMax: Math.max(run.info.total || 0, run.lastRound), integerX: true,
        series: [
          { name: 'policy loss', run: run.info.id, color: run.color, points: rows.map((x) => [x.round, x.pl]) },
          { name: 'value loss', run: run.info.id, color: run.color, dashed: true, points: rows.map((x) => [x.round, x.vl]) },
        ],
      }));
    } else if (!run.seeds.size && (run.ended || (run.info.config || {}).controller === 'none')) {
      const alone = (run.info.config || {}).controller === 'none';
      col.append(h('div', { class: 'panel' }, h('p', { class: 'nodata', text: alone ? 'the host trains alone: no seed, no decision' : 'no seed was germinated' })));
      if (!run.log.length) return col;
    } else {
      col.append(timeline(run));
      col.append(alphaChart(run));
      col.append(seedTable(run));
    }
    if (run.kind !== 'ppo' || run.log.length) col.append(decisionLog(run));
    return col;
  }

  state.openConfig = {};
  function render() {
    const t0 = performance.now();
    draw();
    state.renders++;
    state.renderMs += performance.now() - t0;
  }
  function draw() {
    const runs = state.order.map((id) => state.runs.get(id));
    document.getElementById('empty').hidden = runs.length > 0;
    document.getElementById('cards').replaceChildren(...runs.map(card));
    document.getElementById('compare').replaceChildren(...compareCharts(runs));
    document.getElementById('columns').replaceChildren(...runs.map(column));
    const st = document.getElementById('status');
    const running = runs.some((r) => !r.ended);
    const text = {
      connecting: 'connecting…', live: running ? 'live' : 'connected', reconnecting: 'reconnecting…',
      closed: running ? 'the server has stopped' : 'finished · the server has stopped', disconnected: 'disconnected',
    }[state.connection];
    st.textContent = text;
    st.className = 'status ' + state.connection;
  }
  // Redraws are batched: at most one every renderEvery ms, none while the
  // tab is hidden (one on its return). A redraw rebuilds the page's SVG,
  // some 20 ms of the browser's time: batching keeps a browser on the
  // training machine from taking its cores.
  const renderEvery = 400;
  let pending = false;
  let hiddenDirty = false;
  function schedule() {
    if (document.hidden) { hiddenDirty = true; return; }
    if (pending) return;
    pending = true;
    setTimeout(() => { pending = false; render(); }, renderEvery);
  }
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden && hiddenDirty) { hiddenDirty = false; schedule(); }
  });

  // ---- the stream -------------------------------------------------------
  function connect() {
    const es = new EventSource('/api/events');
    es.addEventListener('hello', (m) => {
      const d = JSON.parse(m.data);
      state.title = d.title || 'esper';
      document.getElementById('title').textContent = state.title + ' dashboard';
      document.title = state.title + ' dashboard';
      state.runs = new Map();
      state.order = [];
      state.live = false;
      state.resets++;
      state.connection = 'live';
      schedule();
    });
    es.addEventListener('run', (m) => {
      const info = JSON.parse(m.data);
      if (!state.runs.has(info.id)) state.order.push(info.id);
      state.runs.set(info.id, newRun(info, state.order.indexOf(info.id)));
      schedule();
    });
    es.addEventListener('ev', (m) => {
      const d = JSON.parse(m.data);
      const run = state.runs.get(d.run);
      if (!run) return;
      apply(run, d.e);
      if (state.live) state.liveEvents++; else state.historyEvents++;
      schedule();
    });
    es.addEventListener('live', () => { state.live = true; schedule(); });
    es.addEventListener('end', (m) => {
      const run = state.runs.get(JSON.parse(m.data).run);
      if (run) run.ended = true;
      schedule();
    });
    es.addEventListener('bye', () => {
      state.connection = 'closed';
      es.close();
      schedule();
    });
    es.onerror = () => {
      if (state.connection === 'closed') return;
      state.connection = es.readyState === EventSource.CLOSED ? 'disconnected' : 'reconnecting';
      schedule();
    };
  }

  render();
  connect();
})();
