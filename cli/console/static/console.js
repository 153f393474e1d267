// The console page: polls GET /api/state every second and redraws; flips a flag with POST /api/flags.
// Built with textContent only (node ids and messages never become markup).
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
  renderFlags(state);
  renderOwnership(state);
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
