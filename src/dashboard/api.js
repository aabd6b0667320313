// The dashboard's calls to the API, with the key typed in (kept in this tab's session storage,
// sent only to this server, as a bearer token), and who that key is once signed in.

/** Where the key is kept: this tab's session storage, never a cookie. */
export const KEY = 'sluice.key';

/** Who the key is (`GET /v1/me`), once signed in; null when signed out. */
export const session = { me: null };

export class ApiProblem extends Error {
  constructor(status, problem) {
    super(problem?.detail ?? problem?.title ?? `HTTP ${status}`);
    this.status = status;
    this.code = problem?.code ?? null;
  }
}

export async function api(method, path, { query = {}, body } = {}) {
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
export const tenantQuery = (tenant) => (session.me?.role === 'admin' ? { tenant } : {});
