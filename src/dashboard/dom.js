// The dashboard's page building: elements made from text, never from markup (ids, inputs,
// results and error messages are the tenants' own words), tables, links into the hash routes,
// and the problem line.

export const $ = (id) => document.getElementById(id);

/** An element with attributes and children; strings become text nodes, never markup. */
export function el(tag, attrs = {}, ...children) {
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

export function link(path, params, ...children) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  return el('a', { href: `#${path}${q.size > 0 ? `?${q}` : ''}` }, ...children);
}

export function showProblem(error) {
  const box = $('problem');
  if (!error) {
    box.hidden = true;
    box.textContent = '';
    return;
  }
  box.hidden = false;
  box.textContent = error.code ? `${error.message} (${error.code})` : String(error.message ?? error);
}

export function table(headings, rows, empty = 'None.') {
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

export const num = (n) => el('td', { class: 'n' }, Number(n).toLocaleString('en'));
export const json = (value) => el('pre', {}, JSON.stringify(value, null, 2));
export const stateCell = (state) => el('td', { class: `state-${state}` }, state);
export const errorText = (e) => (e ? `${e.code}: ${e.message}` : '');
