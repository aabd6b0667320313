// The dashboard's script: plain browser JavaScript modules, no build step and no dependency. It
// reads the API with the key typed in and writes every value into the page as text, never as
// markup (dom.js). Views follow the address's hash, so a view can be reloaded and linked:
//   #/                                      the queues (admin key) or the tenant's usage
//   #/operations?tenant=&state=&kind=&cursor=   a page of a tenant's operations
//   #/operation?tenant=&id=                 one operation, its attempts, effects and events
// While "Live" is ticked, the view is read again every few seconds (live()).
import { ApiProblem, api, KEY, session } from './api.js';
import { $, showProblem } from './dom.js';
import { VIEWS } from './views.js';

/** How often a live view is read again. */
const LIVE_MS = 5000;

function hashRoute() {
  const [path, search = ''] = location.hash.replace(/^#/, '').split('?');
  return { path: path || '/', params: new URLSearchParams(search) };
}

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
    const who = session.me ?? (await api('GET', '/v1/me'));
    if (mine !== latest) return;
    session.me = who;
    $('sign-in').hidden = true;
    $('nav').hidden = false;
    $('who').textContent = session.me.role === 'admin' ? 'admin key' : `tenant ${session.me.tenant}`;
    const { path, params } = hashRoute();
    const nodes = await (VIEWS[path] ?? VIEWS['/'])(params);
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
  session.me = null;
  $('nav').hidden = true;
  $('view').replaceChildren();
  $('sign-in').hidden = false;
  showProblem(error ?? null);
}

/**
 * Whether a live tick would take something from the operator: a field of the view has the focus
 * (a filter being typed), or a field of an action's form was changed (a reason typed, an effect's
 * outcome chosen: a render would write a new, empty form over it, and over the problem an action
 * that failed showed).
 */
function busy() {
  const active = document.activeElement;
  if (active && $('view').contains(active) && active.matches('input, select, textarea')) return true;
  const edited = (field) =>
    field.matches('select') ? field.selectedIndex !== 0 : field.value !== field.defaultValue;
  return [...$('view').querySelectorAll('form.act input, form.settle input, form.settle select')].some(
    edited,
  );
}

/** Reads the view again, while signed in, ticked, shown (not a background tab) and not busy. */
function live() {
  if (!session.me || !$('live').checked || document.hidden || rendering > 0 || busy()) return;
  render();
}

$('sign-in').addEventListener('submit', (event) => {
  event.preventDefault();
  sessionStorage.setItem(KEY, $('key').value);
  $('key').value = '';
  session.me = null;
  render();
});
$('sign-out').addEventListener('click', () => {
  signedOut();
  location.hash = '#/';
});
window.addEventListener('hashchange', render);
document.addEventListener('sluice:changed', render);
setInterval(live, LIVE_MS);
render();
