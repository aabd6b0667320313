// The dashboard's views, one per hash route: the queues (admin key) or a tenant's usage, a page
// of a tenant's operations (or, for an admin key, of every tenant's dead letters and operations
// needing reconciliation), and one operation whole with the actions its state allows.
import { api, session, tenantQuery } from './api.js';
import { el, errorText, json, link, num, showProblem, stateCell, table } from './dom.js';

const STATES = ['queued', 'running', 'succeeded', 'failed', 'cancelled', 'dead', 'needs_reconciliation'];
const PAGE = 50;

/** A count the API stops at 10,000 (GET /v1/queues): there, at least that many. */
const count = (n) => (n >= 10_000 ? '10,000 or more' : n.toLocaleString('en'));

/** An action changed the operation: the page reads its view again (app.js). */
const changed = () => document.dispatchEvent(new Event('sluice:changed'));

async function homeView() {
  if (session.me.role === 'tenant') {
    const usage = await api('GET', `/v1/tenants/${encodeURIComponent(session.me.tenant)}/usage`);
    return [
      el('h2', {}, `Tenant ${session.me.tenant}`),
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
    el('h2', {}, 'Waiting for an operator, every tenant'),
    el(
      'ul',
      { id: 'awaiting' },
      el(
        'li',
        {},
        link('/operations', { state: 'dead' }, 'Dead operations'),
        `: ${count(q.awaitingOperator.dead)} (redrive them)`,
      ),
      el(
        'li',
        {},
        link('/operations', { state: 'needs_reconciliation' }, 'Operations needing reconciliation'),
        `: ${count(q.awaitingOperator.needsReconciliation)} (establish what the provider did)`,
      ),
    ),
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

/** The states an admin key may list across tenants: those an operator acts on (the API's rule). */
const ACROSS_TENANTS = ['dead', 'needs_reconciliation'];

async function operationsView(params) {
  const admin = session.me.role === 'admin';
  const tenant = admin ? params.get('tenant') : session.me.tenant;
  const state = params.get('state') ?? '';
  const kind = params.get('kind') ?? '';
  // An admin key that names no tenant lists every tenant's operations in a state it acts on.
  const across = admin && !tenant;
  if (across && !ACROSS_TENANTS.includes(state))
    throw new Error('name a tenant, or list the dead operations or those needing reconciliation');
  const page = await api('GET', '/v1/operations', {
    query: { ...(across ? {} : tenantQuery(tenant)), state, kind, cursor: params.get('cursor'), limit: PAGE },
  });
  const filters = el(
    'form',
    {
      class: 'filters',
      onsubmit: (event) => {
        event.preventDefault();
        const f = event.target.elements;
        const q = new URLSearchParams();
        if (admin && tenant) q.set('tenant', tenant);
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
        across ? null : el('option', { value: '' }, 'any'),
        (across ? ACROSS_TENANTS : STATES).map((s) => el('option', { value: s, selected: s === state }, s)),
      ),
    ),
    el('label', {}, 'Kind ', el('input', { name: 'kind', value: kind })),
    el('button', { type: 'submit' }, 'Filter'),
  );
  // The tenant an operation's links name: an admin key's listing names it, a tenant key's never.
  const tenantOf = (op) => (admin ? op.tenant : '');
  const rows = page.operations.map((op) =>
    el(
      'tr',
      {},
      across ? el('td', {}, link('/operations', { tenant: op.tenant }, op.tenant)) : null,
      el('td', {}, link('/operation', { tenant: tenantOf(op), id: op.id }, op.id)),
      el('td', {}, op.kind),
      stateCell(op.state),
      el('td', {}, `${op.attempt}/${op.maxAttempts}`),
      el('td', {}, op.createdAt),
      el('td', {}, errorText(op.error)),
    ),
  );
  const headings = ['id', 'kind', 'state', 'attempt', 'accepted', 'error'];
  const dead = page.operations.filter((op) => op.state === 'dead');
  // The dead letters of this page back to the queue in one call (POST /v1/redrives), each recorded.
  const redrive =
    admin && dead.length > 0
      ? el(
          'div',
          { id: 'page-actions' },
          actionForm(`Redrive the ${dead.length} dead on this page`, async (reason) => {
            const { results } = await api('POST', '/v1/redrives', {
              body: { reason, operations: dead.map((op) => ({ tenant: op.tenant, id: op.id })) },
            });
            const refused = results.filter((r) => !r.ok);
            if (refused.length > 0)
              throw new Error(
                `${refused.length} not redriven: ${refused.map((r) => `${r.tenant}/${r.id} (${r.code})`).join(', ')}`,
              );
          }),
        )
      : null;
  return [
    el('h2', {}, across ? `Operations ${state}, every tenant` : `Operations of ${tenant}`),
    filters,
    redrive,
    table(across ? ['tenant', ...headings] : headings, rows, 'No operation on this page.'),
    page.nextCursor
      ? el(
          'p',
          {},
          link(
            '/operations',
            { tenant: admin ? tenant : '', state, kind, cursor: page.nextCursor },
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
          changed();
        } catch (error) {
          showProblem(error);
        }
      },
    },
    el('label', {}, 'Reason ', el('input', { name: 'reason', required: true, maxlength: 1000 })),
    el('button', { type: 'submit' }, label),
  );
}

/** JSON typed into a field, or a problem that names the field. */
function parsed(text, what) {
  try {
    return JSON.parse(text);
  } catch {
    throw new Error(`${what} is not JSON`);
  }
}

/**
 * Settles an operation that needs reconciliation with what was established at the provider:
 * each effect still pending named `committed` (with the provider's answer as JSON, which a
 * requeued handler gets back, and its reference) or `absent`, then a resolution. The API refuses
 * an end that leaves a pending effect unnamed; an effect left at "not established" is not sent.
 */
function settleForm(op, send) {
  const pending = (op.effects ?? []).filter((e) => e.state === 'pending');
  return el(
    'form',
    {
      class: 'settle',
      onsubmit: async (event) => {
        event.preventDefault();
        const f = event.target.elements;
        try {
          const effects = [];
          for (const [i, e] of pending.entries()) {
            const outcome = f[`outcome-${i}`].value;
            if (outcome === 'absent') effects.push({ name: e.name, outcome });
            if (outcome === 'committed') {
              const reference = f[`reference-${i}`].value;
              effects.push({
                name: e.name,
                outcome,
                result: parsed(f[`answer-${i}`].value, `the provider's answer for ${e.name}`),
                ...(reference === '' ? {} : { reference }),
              });
            }
          }
          const resolution = f.resolution.value;
          const result = f.result.value.trim();
          await send({
            reason: f.reason.value,
            resolution,
            effects,
            ...(resolution === 'succeeded' && result !== '' ? { result: parsed(result, 'the result') } : {}),
          });
          changed();
        } catch (error) {
          showProblem(error);
        }
      },
    },
    el('h3', {}, 'Settle with what the provider shows'),
    pending.map((e, i) =>
      el(
        'fieldset',
        {},
        el('legend', {}, `Effect ${e.name} (key ${e.key})`),
        el(
          'label',
          {},
          'Outcome ',
          el(
            'select',
            { name: `outcome-${i}` },
            el('option', { value: '' }, 'not established'),
            el('option', { value: 'committed' }, 'committed'),
            el('option', { value: 'absent' }, 'absent'),
          ),
        ),
        el('label', {}, " Provider's answer (JSON) ", el('input', { name: `answer-${i}`, value: 'null' })),
        el('label', {}, ' Reference ', el('input', { name: `reference-${i}`, maxlength: 500 })),
      ),
    ),
    el(
      'label',
      {},
      'Resolution ',
      el(
        'select',
        { name: 'resolution' },
        ['requeue', 'succeeded', 'failed'].map((r) => el('option', { value: r }, r)),
      ),
    ),
    el('label', {}, ' Result, if succeeded (JSON) ', el('input', { name: 'result' })),
    el('label', {}, ' Reason ', el('input', { name: 'reason', required: true, maxlength: 2000 })),
    el('button', { type: 'submit' }, 'Settle'),
  );
}

async function operationView(params) {
  const tenant = session.me.role === 'tenant' ? session.me.tenant : params.get('tenant');
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
              changed();
            } catch (error) {
              showProblem(error);
            }
          },
        },
        'Cancel',
      ),
    );
  }
  if (session.me.role === 'admin' && op.state === 'dead') {
    actions.push(
      actionForm('Redrive', (reason) =>
        api('POST', `${path}/redrive`, { query: { tenant }, body: { reason } }),
      ),
    );
  }
  if (session.me.role === 'admin' && op.state === 'needs_reconciliation') {
    actions.push(
      el(
        'p',
        { class: 'muted' },
        'Requeue runs the handler again: committed effects return their recorded results, a pending one is looked up or sent again under its key. Or settle it below with what the provider shows (docs/operations.md, "Reconciliation").',
      ),
      actionForm('Requeue', (reason) =>
        api('POST', `${path}/reconcile`, { query: { tenant }, body: { reason, resolution: 'requeue' } }),
      ),
      settleForm(op, (body) => api('POST', `${path}/reconcile`, { query: { tenant }, body })),
    );
  }
  return [
    el(
      'p',
      {},
      link('/operations', { tenant: session.me.role === 'admin' ? tenant : '' }, `← operations of ${tenant}`),
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

export const VIEWS = { '/': homeView, '/operations': operationsView, '/operation': operationView };
