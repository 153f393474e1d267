// The console page: polls GET /api/state every second and redraws; flips a flag with POST /api/flags.
// Built with textContent only (node ids and messages never become markup); the plots are inline SVG
// drawn here (no charting library: three line plots do not need one).
const $ = (id) => document.querySelector(`[data-testid="${id}"]`);

function el(tag, text, attributes = {}) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  return node;
}

const rate = (value) => (value === undefined ? '–' : value.toFixed(1));
const onOff = (value) => (value === undefined ? '–' : value ? 'on' : 'off');
let flipping = false;

function renderNodes(state) {
  const rows = state.nodes.map((node) => {
    const health = node.health === 'ok' ? 'up' : node.health === 'down' ? 'down' : `${node.health}`;
    const row = el('tr', undefined, { 'data-node': node.id, 'data-health': health });
    row.append(
      el('td', node.id),
      el('td', health, { class: health === 'up' ? 'up' : health === 'down' ? 'down' : 'degraded' }),
      el('td', node.backgroundWork),
      el('td', rate(node.rates?.accepted), { class: 'num' }),
      el('td', rate(node.rates?.delivered), { class: 'num' }),
      el('td', rate(node.rates?.streamPublishes), { class: 'num' }),
    );
    return row;
  });
  $('nodes').replaceChildren(...rows);
  for (const key of ['accepted', 'delivered', 'streamPublishes'])
    $(`rate-${key}`).textContent = rate(state.rates[key]);
}

function renderFlags(state) {
  const head = el('tr');
  head.append(el('th', 'flag'), el('th', 'phase'), el('th', 'file'));
  for (const node of state.nodes) head.append(el('th', node.id));
  head.append(el('th', ''));
  $('flags-head').replaceChildren(head);
  const rows = state.flags.map((flag) => {
    const row = el('tr', undefined, { 'data-flag': flag.key, 'data-desired': String(flag.desired) });
    if (flag.disagree) row.classList.add('disagree');
    row.append(el('td', flag.key, { title: flag.row }), el('td', String(flag.phase)));
    row.append(el('td', onOff(flag.desired), { class: flag.desired ? 'on' : 'off' }));
    for (const node of state.nodes) {
      const acting = node.flags[flag.key]?.acting;
      row.append(el('td', onOff(acting), { class: acting ? 'on' : 'off', 'data-node': node.id }));
    }
    const button = el('button', flag.desired ? 'turn off' : 'turn on', { 'data-testid': `flip-${flag.key}` });
    button.disabled = flipping;
    button.addEventListener('click', () => flip(flag.key, !flag.desired));
    const cell = el('td');
    cell.append(button);
    row.append(cell);
    return row;
  });
  $('flags').replaceChildren(...rows);
}

const SVG_NS = 'http://www.w3.org/2000/svg';

function svgEl(tag, attributes = {}, text = undefined) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

const PLOT = { width: 390, height: 180, left: 46, right: 12, top: 34, bottom: 28 };

/** The y axis' top: the smallest 1, 2 or 5 × 10ⁿ at or above the largest value (1 when all are 0). */
function niceCeil(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 5, 10].map((step) => step * power).find((top) => value <= top * (1 + 1e-9));
}

const tickLabel = (value) => (value >= 10 ? value.toFixed(0) : String(Number(value.toPrecision(2))));

/**
 * One line plot of `series` over the history's window, ending at its newest sample (the console's clock,
 * so a browser on another clock draws the same). A null value is a gap (nothing measured). The figure
 * says how many points it drew (`data-points`, `data-nonzero`), for people reading the DOM and for tests.
 */
function drawPlot(figure, { title, unit, history, series }) {
  const { width, height, left, right, top, bottom } = PLOT;
  const innerWidth = width - left - right;
  const innerHeight = height - top - bottom;
  const windowMs = history.windowSeconds * 1000;
  const end = history.at.at(-1) ?? Date.now();
  const start = end - windowMs;
  const inWindow = (i) => history.at[i] >= start;
  let max = 0;
  let points = 0;
  let nonZero = 0;
  for (const { values } of series)
    values.forEach((value, i) => {
      if (value === null || !inWindow(i)) return;
      max = Math.max(max, value);
      points += 1;
      if (value > 0) nonZero += 1;
    });
  const yTop = niceCeil(max);
  const x = (at) => left + ((at - start) / windowMs) * innerWidth;
  const y = (value) => top + innerHeight - (Math.min(value, yTop) / yTop) * innerHeight;

  const svg = svgEl('svg', { width, height, viewBox: `0 0 ${width} ${height}`, role: 'img' });
  svg.append(svgEl('title', {}, `${title} in ${unit}, last ${history.windowSeconds / 60} min`));
  svg.append(svgEl('text', { x: 4, y: 14, class: 'title' }, title));
  svg.append(svgEl('text', { x: 4, y: 28, class: 'label' }, unit));
  for (const value of [0, yTop / 2, yTop]) {
    svg.append(svgEl('line', { x1: left, x2: left + innerWidth, y1: y(value), y2: y(value), class: 'grid' }));
    svg.append(
      svgEl('text', { x: left - 5, y: y(value) + 4, 'text-anchor': 'end', class: 'label' }, tickLabel(value)),
    );
  }
  const minutes = Math.round(history.windowSeconds / 60);
  for (let m = minutes; m >= 0; m--) {
    const px = x(end - m * 60_000);
    svg.append(svgEl('line', { x1: px, x2: px, y1: top, y2: top + innerHeight, class: 'grid' }));
    const anchor = m === 0 ? 'end' : 'middle'; // the left margin has room for half a label, the right not
    const label = m === 0 ? 'now' : `−${m} min`;
    svg.append(svgEl('text', { x: px, y: height - 8, 'text-anchor': anchor, class: 'label' }, label));
  }
  svg.append(svgEl('line', { x1: left, x2: left, y1: top, y2: top + innerHeight, class: 'axis' }));
  svg.append(
    svgEl('line', {
      x1: left,
      x2: left + innerWidth,
      y1: top + innerHeight,
      y2: top + innerHeight,
      class: 'axis',
    }),
  );

  for (const { values, color, name } of series) {
    let run = [];
    const flush = () => {
      if (run.length > 1)
        svg.append(
          svgEl('polyline', { points: run.join(' '), fill: 'none', stroke: color, 'stroke-width': 1.6 }),
        );
      else if (run.length === 1) {
        const [cx, cy] = run[0].split(',');
        svg.append(svgEl('circle', { cx, cy, r: 2, fill: color }));
      }
      run = [];
    };
    values.forEach((value, i) => {
      if (value === null || !inWindow(i)) flush();
      else run.push(`${x(history.at[i]).toFixed(1)},${y(value).toFixed(1)}`);
    });
    flush();
    if (series.length > 1) {
      const index = series.findIndex((s) => s.name === name);
      const legendX = width - right - (series.length - index) * 52;
      svg.append(svgEl('rect', { x: legendX, y: 7, width: 12, height: 3, fill: color }));
      svg.append(svgEl('text', { x: legendX + 15, y: 12, class: 'label' }, name));
    }
  }
  if (points === 0)
    svg.append(
      svgEl(
        'text',
        { x: left + innerWidth / 2, y: top + innerHeight / 2, 'text-anchor': 'middle', class: 'empty' },
        'nothing measured yet',
      ),
    );
  figure.dataset.points = String(points);
  figure.dataset.nonzero = String(nonZero);
  figure.replaceChildren(svg);
}

function renderPlots(state) {
  const history = state.history;
  $('plots-window').textContent =
    `The whole cluster (every live node summed), one point per poll (${history.intervalMs / 1000} s), the last ${history.windowSeconds / 60} minutes; a gap is a poll with nothing measured.`;
  drawPlot($('plot-accepted'), {
    title: 'messages accepted',
    unit: 'per second',
    history,
    series: [{ name: 'accepted', values: history.accepted, color: '#1f6fb2' }],
  });
  drawPlot($('plot-delivered'), {
    title: 'deliveries to sessions',
    unit: 'per second (every path)',
    history,
    series: [{ name: 'delivered', values: history.delivered, color: '#176f2c' }],
  });
  drawPlot($('plot-fanout'), {
    title: 'fan-out latency',
    unit: 'ms, publish on one node → delivery on another',
    history,
    series: [
      { name: 'p95', values: history.fanoutP95Ms, color: '#c2410c' },
      { name: 'mean', values: history.fanoutMeanMs, color: '#1f6fb2' },
    ],
  });
}

function when(iso) {
  const at = new Date(iso);
  const today = at.toDateString() === new Date().toDateString();
  return today ? at.toLocaleTimeString() : at.toLocaleString();
}

function renderTimeline(state) {
  const entries = state.timeline;
  const message = (text) => {
    const row = el('tr');
    row.append(el('td', text, { colspan: '4', class: 'hint' }));
    return [row];
  };
  const rows =
    entries === null
      ? message('unknown: the database did not answer')
      : entries.length === 0
        ? message('nothing recorded for this environment yet')
        : entries.map((entry) => {
            const row = el('tr', undefined, { 'data-kind': entry.kind, 'data-id': entry.id });
            if (!entry.ok) row.classList.add('trouble');
            row.append(
              el('td', when(entry.at), { title: entry.at }),
              el('td', entry.what),
              el('td', entry.who ?? '–'),
              el('td', entry.outcome),
            );
            return row;
          });
  $('timeline').replaceChildren(...rows);
}

const OUTCOME_COLOR = { successful: '#176f2c', failed: '#b3261e', error: '#b3261e', inconclusive: '#b07d00' };
const short = (value, max = 60) => {
  const text = JSON.stringify(value) ?? '–';
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
};
const seconds = (ms) => (ms < 120_000 ? `${Math.round(ms / 1000)} s` : `${Math.round(ms / 60_000)} min`);

/** A metric's values over its measurements: a line through the ones with a value, a dot each in its outcome's colour. */
function sparkline(measurements) {
  const width = 140;
  const height = 28;
  const svg = svgEl('svg', { width, height, class: 'spark', role: 'img' });
  const values = measurements.map((m) => m.value).filter((v) => v !== null);
  const min = Math.min(...values, 0);
  const max = Math.max(...values, min + 1e-9);
  const step = measurements.length > 1 ? (width - 8) / (measurements.length - 1) : 0;
  const x = (i) => 4 + i * step;
  const y = (v) => height - 4 - ((v - min) / (max - min)) * (height - 8);
  const points = measurements
    .map((m, i) => (m.value === null ? null : `${x(i).toFixed(1)},${y(m.value).toFixed(1)}`))
    .filter(Boolean);
  if (points.length > 1)
    svg.append(
      svgEl('polyline', { points: points.join(' '), fill: 'none', stroke: '#888', 'stroke-width': 1 }),
    );
  measurements.forEach((m, i) => {
    svg.append(
      svgEl('circle', {
        cx: x(i),
        cy: m.value === null ? height - 4 : y(m.value),
        r: 2.5,
        fill: OUTCOME_COLOR[m.outcome] ?? '#888',
      }),
    );
  });
  svg.append(svgEl('title', {}, measurements.map((m) => `${m.index}/${m.count} ${m.outcome}`).join(', ')));
  return svg;
}

function renderPromotion(state) {
  const activity = state.promotion;
  const lock = $('promotion-lock');
  const pause = $('promotion-pause');
  if (!activity) {
    lock.textContent = 'unknown: the database did not answer';
    pause.hidden = true;
    $('analysis-summary').textContent = '';
    $('analysis').replaceChildren();
    return;
  }
  lock.textContent = activity.lock
    ? `held by ${activity.lock.holder}${activity.lock.since === null ? '' : ` since ${when(activity.lock.since)} (${seconds(activity.lock.ageMs)}${activity.lock.stale ? ', stale: --force-unlock may take it' : ''})`}`
    : 'free';
  lock.dataset.held = String(activity.lock !== null);
  const p = activity.pause;
  pause.hidden = p === null;
  pause.textContent = p
    ? `PAUSED: phase ${p.fromPhase} → ${p.toPhase} at its ${p.stage} analysis (${p.metric}: ${p.reason}) since ${when(p.since)}, by ${p.actor}; a human decides: promote --resume or --abort`
    : '';
  const a = activity.analysis;
  const summary = $('analysis-summary');
  if (!a) {
    summary.textContent = 'no promotion of this environment has run an analysis';
    delete summary.dataset.outcome;
    $('analysis').replaceChildren();
    return;
  }
  const stages = a.stages
    .map(
      (s) =>
        `${s.stage} ${s.verdict}${s.decided ? ` (${s.decided})` : ''}${s.metric ? ` on ${s.metric}` : ''}`,
    )
    .join(', ');
  summary.textContent = `phase ${a.fromPhase} → ${a.toPhase} by ${a.actor ?? '?'}, started ${when(a.startedAt)}: ${a.outcome}${a.reason ? ` (${a.reason})` : ''}; ${stages}`;
  summary.dataset.outcome = a.outcome;
  summary.dataset.phase = a.phase;
  const rows = a.metrics.map((series) => {
    const row = el('tr', undefined, { 'data-stage': series.stage, 'data-metric': series.metric });
    const cells = el('td');
    for (const m of series.measurements) {
      const text = m.value === null ? m.outcome : `${Number(m.value.toPrecision(3))}`;
      cells.append(
        el('span', text, {
          class: `measurement ${m.outcome}`,
          'data-outcome': m.outcome,
          title: `${m.index}/${m.count} ${m.outcome} at ${m.at}: ${m.detail}`,
        }),
      );
    }
    const spark = el('td');
    spark.append(sparkline(series.measurements));
    row.append(el('td', series.stage), el('td', series.metric), spark, cells);
    return row;
  });
  $('analysis').replaceChildren(...rows);
}

function renderShadow(state) {
  const shadow = state.shadow;
  const rows = shadow?.rows ?? [];
  const ratio = (r) => (r === null ? 'no comparisons' : `${(r * 100).toFixed(1)} %`);
  $('shadow').replaceChildren(
    ...(rows.length === 0
      ? [
          (() => {
            const row = el('tr');
            row.append(el('td', 'no row is shadowed', { colspan: '7', class: 'hint' }));
            return row;
          })(),
        ]
      : rows.map((r) => {
          const row = el('tr', undefined, { 'data-flag': r.flag });
          if (r.disagree + r.error > 0) row.classList.add('trouble');
          row.append(
            el('td', r.flag),
            el('td', String(r.agree), { class: 'num', 'data-count': 'agree' }),
            el('td', String(r.disagree), { class: 'num', 'data-count': 'disagree' }),
            el('td', String(r.error), { class: 'num', 'data-count': 'error' }),
            el('td', String(r.skipped), { class: 'num', 'data-count': 'skipped' }),
            el('td', ratio(r.agreementRatio), { class: 'num', 'data-count': 'ratio' }),
            el('td', r.runningOn.join(', ') || 'stopped'),
          );
          return row;
        })),
    ...(shadow?.unanswered ?? []).map(({ node, error }) => {
      const row = el('tr');
      row.append(el('td', `${node} did not answer (${error})`, { colspan: '7', class: 'errors' }));
      return row;
    }),
  );
  const mismatches = rows
    .flatMap((r) => r.mismatches.map((m) => ({ ...m, flag: r.flag })))
    .sort((x, y) => y.at.localeCompare(x.at))
    .slice(0, 20);
  $('shadow-mismatches').replaceChildren(
    ...mismatches.map((m) => {
      const row = el('tr', undefined, { 'data-flag': m.flag, 'data-outcome': m.outcome });
      row.append(
        el('td', when(m.at), { title: m.at }),
        el('td', m.node),
        el('td', m.flag),
        el('td', m.subject),
        el('td', m.outcome === 'error' ? `error: ${m.error}` : short(m.local), {
          title: JSON.stringify(m.local) ?? '',
        }),
        el('td', m.outcome === 'error' ? '–' : short(m.shared), { title: JSON.stringify(m.shared) ?? '' }),
      );
      return row;
    }),
  );
}

function renderOwnership(state) {
  const list = (rows) =>
    rows.length === 0 ? 'none' : rows.map((r) => `${r.node ?? 'unowned'} ${r.n}`).join(', ');
  const o = state.ownership;
  const entries = o
    ? [
        ['clock leaders', list(o.clockLeaders)],
        ['watch owners', list(o.watchOwners)],
        ['schedule occurrences fired (last hour)', list(o.scheduleOccurrencesLastHour)],
        [
          'active lease',
          o.activeLease
            ? `${o.activeLease.holder} (epoch ${o.activeLease.epoch}${o.activeLease.live ? '' : ', expired'})`
            : 'not used',
        ],
      ]
    : [['database', 'not answering']];
  $('ownership').replaceChildren(...entries.flatMap(([term, value]) => [el('dt', term), el('dd', value)]));
  const c = state.chains;
  $('chains').textContent = c
    ? `${c.intact} intact, ${c.broken.length} broken${c.broken.length ? ` (${c.broken.join(', ')})` : ''}`
    : 'unknown';
  $('chains').className = c && c.broken.length > 0 ? 'errors' : '';
}

function render(state) {
  $('phase').textContent = state.phase ?? '?';
  $('environment').textContent = state.environment;
  $('lb').textContent = state.loadBalancer;
  $('updated').textContent = `updated ${new Date(state.at).toLocaleTimeString()}`;
  $('errors').hidden = state.errors.length === 0;
  $('errors').textContent = state.errors.join('; ');
  renderNodes(state);
  renderPlots(state);
  renderFlags(state);
  renderTimeline(state);
  renderOwnership(state);
  renderPromotion(state);
  renderShadow(state);
}

async function poll() {
  try {
    const response = await fetch('/api/state', { cache: 'no-store' });
    if (response.ok) render(await response.json());
    else $('updated').textContent = `console: ${(await response.json()).message}`;
  } catch {
    $('updated').textContent = 'the console server does not answer';
  }
}

async function flip(flag, value) {
  flipping = true;
  $('flip-result').textContent = `setting ${flag} ${onOff(value)}…`;
  try {
    const response = await fetch('/api/flags', {
      method: 'POST',
      // The console key rides in its SameSite=Strict cookie: this page never holds the admin token.
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ flag, value }),
    });
    const body = await response.json();
    const pushed =
      body.pushedTo === undefined
        ? 'not pushed (Redis down; the nodes poll the file)'
        : `pushed to ${body.pushedTo} node(s)`;
    const audit = body.audited ? 'audited' : 'no audit event (the audit log already had this value)';
    $('flip-result').textContent = response.ok
      ? `${flag}: ${onOff(body.previous)} → ${onOff(value)}; ${audit}; ${pushed}`
      : `refused: ${body.message}`;
  } catch (error) {
    $('flip-result').textContent = `failed: ${error.message}`;
  } finally {
    flipping = false;
    await poll();
  }
}

await poll();
setInterval(poll, 1000);
