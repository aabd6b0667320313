// The dashboard's script: plain browser JavaScript, no build step and no dependency. It reads the
// API with the key typed in (kept in this tab's session storage) and writes every value into the
// page as text, never as markup: operation ids, inputs, results and error messages are the
// tenants' own words. Views follow the address's hash, so a view can be reloaded and linked:
//   #/                                      the queues (admin key) or the tenant's usage
//   #/operations?tenant=&state=&kind=&cursor=   a page of a tenant's operations
//   #/operation?tenant=&id=                 one operation, its attempts, effects and events
// While "Live" is ticked, the view is read again every few seconds (live()).

const KEY = 'sluice.key';
const STATES = ['queued', 'running', 'succeeded', 'failed', 'cancelled', 'dead', 'needs_reconciliation'];
const PAGE = 50;
/** How often a live view is read again. */
const LIVE_MS = 5000;

/** Who the key is (`GET /v1/me`), once signed in. */
let me = null;

const $ = (id) => document.getElementById(id);

/** An element with attributes and children; strings become text nodes, never markup. */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(typeof child === 'string' || typeof child === 'number' ? String(child) : child);
  }
  return node;
}

class ApiProblem extends Error {
  constructor(status, problem) {
    super(problem?.detail ?? problem?.title ?? `HTTP ${status}`);
    this.status = status;
    this.code = problem?.code ?? null;
  }
}

async function api(method, path, { query = {}, body } = {}) {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null && v !== '') params.set(k, v);
  const url = path + (params.size > 0 ? `?${params}` : '');
  const headers = { authorization: `Bearer ${sessionStorage.getItem(KEY) ?? ''}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(url, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store',
  });
  const text = await response.text();
  let json = null;
  try {
    json = text === '' ? null : JSON.parse(text);
  } catch {
    json = null;
  }
  if (!response.ok) throw new ApiProblem(response.status, json);
  return json;
}

/** The `?tenant=` an admin key names; a tenant key names none (its tenant comes from the key). */
const tenantQuery = (tenant) => (me?.role === 'admin' ? { tenant } : {});

function hashRoute() {
  const [path, search = ''] = location.hash.replace(/^#/, '').split('?');
  return { path: path || '/', params: new URLSearchParams(search) };
}

function link(path, params, ...children) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  return el('a', { href: `#${path}${q.size > 0 ? `?${q}` : ''}` }, ...children);
}

function showProblem(error) {
  const box = $('problem');
  if (!error) {
    box.hidden = true;
    box.textContent = '';
    return;
  }
  box.hidden = false;
  box.textContent = error.code ? `${error.message} (${error.code})` : String(error.message ?? error);
}

function table(headings, rows, empty = 'None.') {
  if (rows.length === 0) return el('p', { class: 'muted' }, empty);
  return el(
    'table',
    {},
    el(
      'thead',
      {},
      el(
        'tr',
        {},
        headings.map((h) => el('th', {}, h)),
      ),
    ),
    el('tbody', {}, rows),
  );
}

const num = (n) => el('td', { class: 'n' }, Number(n).toLocaleString('en'));
const json = (value) => el('pre', {}, JSON.stringify(value, null, 2));
const stateCell = (state) => el('td', { class: `state-${state}` }, state);
const errorText = (e) => (e ? `${e.code}: ${e.message}` : '');

async function homeView() {
  if (me.role === 'tenant') {
    const usage = await api('GET', `/v1/tenants/${encodeURIComponent(me.tenant)}/usage`);
    return [
      el('h2', {}, `Tenant ${me.tenant}`),
      el('p', {}, link('/operations', {}, 'Operations')),
      ...usageBlocks(usage),
    ];
  }
  const q = await api('GET', '/v1/queues');
  const open = el(
    'form',
    {
      class: 'filters',
      onsubmit: (event) => {
        event.preventDefault();
        location.hash = `#/operations?${new URLSearchParams({ tenant: event.target.elements.tenant.value })}`;
      },
    },
    el('label', {}, 'Tenant ', el('input', { name: 'tenant', required: true })),
    el('button', { type: 'submit' }, 'Operations'),
  );
  return [
    el('h2', {}, 'Classes'),
    classTable(q.classes, 'No class yet.'),
    el('h2', {}, 'Tenants holding work'),
    table(
      ['class', 'tenant', 'waiting', 'running'],
      q.queues.map((r) =>
        el(
          'tr',
          {},
          el('td', {}, r.class),
          el('td', {}, link('/operations', { tenant: r.tenant }, r.tenant)),
          num(r.waiting),
          num(r.running),
        ),
      ),
      'Nothing waits or runs.',
    ),
    q.queuesLeftOut > 0 ? el('p', { class: 'muted' }, `${q.queuesLeftOut} more not shown.`) : null,
    el('h2', {}, "A tenant's operations"),
    open,
  ];
}

/** Waiting and running per class: the queues' counters, every tenant's or one tenant's. */
function classTable(classes, empty) {
  return table(
    ['class', 'waiting', 'running'],
    classes.map((c) => el('tr', {}, el('td', {}, c.class), num(c.waiting), num(c.running))),
    empty,
  );
}

function usageBlocks(usage) {
  return [
    el('h3', {}, 'Queues'),
    classTable(usage.classes),
    el('h3', {}, 'Spend this window'),
    table(
      ['provider', 'committed', 'reserved', 'window ends'],
      usage.budgets.map((b) =>
        el(
          'tr',
          {},
          el('td', {}, b.provider),
          num(b.committed),
          num(b.reserved),
          el('td', {}, b.windowEnd ?? ''),
        ),
      ),
    ),
  ];
}

async function operationsView(params) {
  const tenant = me.role === 'tenant' ? me.tenant : params.get('tenant');
  if (!tenant) throw new Error('name a tenant');
  const state = params.get('state') ?? '';
  const kind = params.get('kind') ?? '';
  const page = await api('GET', '/v1/operations', {
    query: { ...tenantQuery(tenant), state, kind, cursor: params.get('cursor'), limit: PAGE },
  });
  const filters = el(
    'form',
    {
      class: 'filters',
      onsubmit: (event) => {
        event.preventDefault();
        const f = event.target.elements;
        const q = new URLSearchParams();
        if (me.role === 'admin') q.set('tenant', tenant);
        if (f.state.value) q.set('state', f.state.value);
        if (f.kind.value) q.set('kind', f.kind.value);
        location.hash = `#/operations?${q}`;
      },
    },
    el(
      'label',
      {},
      'State ',
      el(
        'select',
        { name: 'state' },
        el('option', { value: '' }, 'any'),
        STATES.map((s) => el('option', { value: s, selected: s === state }, s)),
      ),
    ),
    el('label', {}, 'Kind ', el('input', { name: 'kind', value: kind })),
    el('button', { type: 'submit' }, 'Filter'),
  );
  const rows = page.operations.map((op) =>
    el(
      'tr',
      {},
      el('td', {}, link('/operation', { tenant: me.role === 'admin' ? tenant : '', id: op.id }, op.id)),
      el('td', {}, op.kind),
      stateCell(op.state),
      el('td', {}, `${op.attempt}/${op.maxAttempts}`),
      el('td', {}, op.createdAt),
      el('td', {}, errorText(op.error)),
    ),
  );
  return [
    el('h2', {}, `Operations of ${tenant}`),
    filters,
    table(['id', 'kind', 'state', 'attempt', 'accepted', 'error'], rows, 'No operation on this page.'),
    page.nextCursor
      ? el(
          'p',
          {},
          link(
            '/operations',
            { tenant: me.role === 'admin' ? tenant : '', state, kind, cursor: page.nextCursor },
            'Next page',
          ),
        )
      : el('p', { class: 'muted' }, 'End of the list.'),
  ];
}

/** A form with a reason that posts an admin action, then shows the operation again. */
function actionForm(label, run) {
  return el(
    'form',
    {
      class: 'act',
      onsubmit: async (event) => {
        event.preventDefault();
        const reason = event.target.elements.reason.value;
        try {
          await run(reason);
          await render();
        } catch (error) {
          showProblem(error);
        }
      },
    },
    el('label', {}, 'Reason ', el('input', { name: 'reason', required: true, maxlength: 1000 })),
    el('button', { type: 'submit' }, label),
  );
}

async function operationView(params) {
  const tenant = me.role === 'tenant' ? me.tenant : params.get('tenant');
  const id = params.get('id');
  if (!tenant || !id) throw new Error('name a tenant and an operation');
  const path = `/v1/operations/${encodeURIComponent(id)}`;
  const op = await api('GET', path, {
    query: { ...tenantQuery(tenant), include: 'attempts,effects,events' },
  });
  const actions = [];
  if (op.state === 'queued' || op.state === 'running') {
    actions.push(
      el(
        'button',
        {
          type: 'button',
          onclick: async () => {
            try {
              await api('POST', `${path}/cancel`, { query: tenantQuery(tenant) });
              await render();
            } catch (error) {
              showProblem(error);
            }
          },
        },
        'Cancel',
      ),
    );
  }
  if (me.role === 'admin' && op.state === 'dead') {
    actions.push(
      actionForm('Redrive', (reason) =>
        api('POST', `${path}/redrive`, { query: { tenant }, body: { reason } }),
      ),
    );
  }
  if (me.role === 'admin' && op.state === 'needs_reconciliation') {
    actions.push(
      el(
        'p',
        { class: 'muted' },
        'Requeue runs the handler again: committed effects return their recorded results, a pending one is looked up or sent again under its key. To settle it otherwise, use the CLI or the API (docs/operations.md, "Reconciliation").',
      ),
      actionForm('Requeue', (reason) =>
        api('POST', `${path}/reconcile`, { query: { tenant }, body: { reason, resolution: 'requeue' } }),
      ),
    );
  }
  return [
    el(
      'p',
      {},
      link('/operations', { tenant: me.role === 'admin' ? tenant : '' }, `← operations of ${tenant}`),
    ),
    el('h2', {}, `Operation ${op.id}`),
    el(
      'dl',
      {},
      [
        ['tenant', tenant],
        ['kind', op.kind],
        ['class', op.class],
        ['state', op.state],
        ['attempt', `${op.attempt}/${op.maxAttempts}`],
        ['accepted', op.createdAt],
        ['updated', op.updatedAt],
        ['finished', op.finishedAt ?? ''],
        ['deadline', op.deadlineAt ?? ''],
        ['cancel', op.cancel ?? ''],
        ['lease', op.lease ? `${op.lease.worker ?? ''} until ${op.lease.expiresAt}` : ''],
        ['error', errorText(op.error)],
      ].flatMap(([k, v]) => [el('dt', {}, k), el('dd', { class: k === 'state' ? `state-${v}` : null }, v)]),
    ),
    actions.length > 0 ? el('div', { id: 'actions' }, actions) : null,
    el('h3', {}, 'Input'),
    json(op.input),
    op.state === 'succeeded' ? [el('h3', {}, 'Result'), json(op.result)] : null,
    el('h3', {}, 'Attempts'),
    table(
      ['attempt', 'outcome', 'started', 'ended', 'error'],
      (op.attempts ?? []).map((a) =>
        el(
          'tr',
          {},
          num(a.attempt),
          el('td', {}, a.outcome),
          el('td', {}, a.startedAt),
          el('td', {}, a.endedAt ?? ''),
          el('td', {}, errorText(a.error)),
        ),
      ),
    ),
    el('h3', {}, 'Effects'),
    table(
      ['name', 'state', 'provider', 'key', 'sends', 'reference', 'error'],
      (op.effects ?? []).map((e) =>
        el(
          'tr',
          {},
          el('td', {}, e.name),
          el('td', {}, e.state),
          el('td', {}, e.provider ?? ''),
          el('td', {}, e.key),
          num(e.sends),
          el('td', {}, e.reference ?? ''),
          el('td', {}, errorText(e.error)),
        ),
      ),
    ),
    el('h3', {}, 'Operator actions'),
    table(
      ['at', 'action', 'by', 'reason'],
      (op.events ?? []).map((e) =>
        el(
          'tr',
          {},
          el('td', {}, e.at),
          el('td', {}, e.action),
          el('td', {}, e.by ?? ''),
          el('td', {}, e.reason ?? ''),
        ),
      ),
    ),
  ];
}

const VIEWS = { '/': homeView, '/operations': operationsView, '/operation': operationView };

/**
 * The number of the latest render. A render overtaken by another (a new view, a new key) or by a
 * sign-out shows nothing of what it read: its answers may belong to a key no longer signed in.
 */
let latest = 0;

/** Renders in flight: a live tick waits for them rather than overtake them. */
let rendering = 0;

async function render() {
  rendering++;
  try {
    await renderView();
  } finally {
    rendering--;
  }
}

async function renderView() {
  const mine = ++latest;
  showProblem(null);
  const view = $('view');
  if (!sessionStorage.getItem(KEY)) return signedOut();
  try {
    const who = me ?? (await api('GET', '/v1/me'));
    if (mine !== latest) return;
    me = who;
    $('sign-in').hidden = true;
    $('nav').hidden = false;
    $('who').textContent = me.role === 'admin' ? 'admin key' : `tenant ${me.tenant}`;
    const { path, params } = hashRoute();
    const nodes = await (VIEWS[path] ?? homeView)(params);
    if (mine !== latest) return;
    view.replaceChildren(...nodes.flat().filter(Boolean));
  } catch (error) {
    if (mine !== latest) return;
    if (error instanceof ApiProblem && error.status === 401) return signedOut(error);
    view.replaceChildren();
    showProblem(error);
  }
}

function signedOut(error) {
  latest++;
  sessionStorage.removeItem(KEY);
  me = null;
  $('nav').hidden = true;
  $('view').replaceChildren();
  $('sign-in').hidden = false;
  showProblem(error ?? null);
}

/**
 * Whether a live tick would take something from the operator: a field of the view has the focus
 * (a filter being typed), or an action's reason has text in it (a render would write a new, empty
 * form over it, and over the problem an action that failed showed).
 */
function busy() {
  const active = document.activeElement;
  if (active && $('view').contains(active) && active.matches('input, select, textarea')) return true;
  return [...$('view').querySelectorAll('form.act input')].some((field) => field.value !== '');
}

/** Reads the view again, while signed in, ticked, shown (not a background tab) and not busy. */
function live() {
  if (!me || !$('live').checked || document.hidden || rendering > 0 || busy()) return;
  render();
}

$('sign-in').addEventListener('submit', (event) => {
  event.preventDefault();
  sessionStorage.setItem(KEY, $('key').value);
  $('key').value = '';
  me = null;
  render();
});
$('sign-out').addEventListener('click', () => {
  signedOut();
  location.hash = '#/';
});
window.addEventListener('hashchange', render);
setInterval(live, LIVE_MS);
render();
