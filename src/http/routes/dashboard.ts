/**
 * @module http/routes/dashboard
 * The dashboard: one page and its script modules, style sheet and icon, served as they are
 * (src/dashboard/). The page holds no data and needs no key to load; the key an operator types
 * stays in the tab's session storage and goes, as a bearer token, only to this server's `/v1/`
 * routes, which decide what it may read. No cookie carries it, so no other site can make a
 * browser act with it, and the policy below lets the page run only its own script.
 */
import { readFileSync } from 'node:fs';
import type { FastifyInstance, FastifyReply } from 'fastify';

const ASSETS = new URL('../../dashboard/', import.meta.url);

/**
 * Its own script and style sheet, fetches to this origin, nothing else: no inline script (every
 * value the page shows is set as text, never as markup), no frames around it (clickjacking on
 * its cancel and redrive buttons), no form posted elsewhere, no `<base>` to move its links.
 */
export const DASHBOARD_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
  "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const FILES = [
  { path: '/dashboard', file: 'index.html', type: 'text/html; charset=utf-8' },
  { path: '/dashboard/app.js', file: 'app.js', type: 'text/javascript; charset=utf-8' },
  { path: '/dashboard/api.js', file: 'api.js', type: 'text/javascript; charset=utf-8' },
  { path: '/dashboard/dom.js', file: 'dom.js', type: 'text/javascript; charset=utf-8' },
  { path: '/dashboard/views.js', file: 'views.js', type: 'text/javascript; charset=utf-8' },
  { path: '/dashboard/app.css', file: 'app.css', type: 'text/css; charset=utf-8' },
  // Named by the page: without one, a browser asks for /favicon.ico, a 404 on every visit.
  { path: '/dashboard/icon.svg', file: 'icon.svg', type: 'image/svg+xml' },
] as const;

const OPERATION_IDS: Record<(typeof FILES)[number]['file'], string> = {
  'index.html': 'dashboard',
  'app.js': 'dashboardScript',
  'api.js': 'dashboardApiModule',
  'dom.js': 'dashboardDomModule',
  'views.js': 'dashboardViewsModule',
  'app.css': 'dashboardStyles',
  'icon.svg': 'dashboardIcon',
};

function pageHeaders(reply: FastifyReply, type: string): FastifyReply {
  return reply
    .type(type)
    .header('content-security-policy', DASHBOARD_CSP)
    .header('x-frame-options', 'DENY')
    .header('referrer-policy', 'no-referrer');
}

/** Registers the dashboard's files, public, each read once when the server is built. */
export function dashboardRoutes(app: FastifyInstance): void {
  for (const { path, file, type } of FILES) {
    // Read once, when the server is built: a missing file fails the start, not a request.
    const body = readFileSync(new URL(file, ASSETS));
    app.get(
      path,
      {
        schema: {
          summary: path === '/dashboard' ? 'The dashboard' : `The dashboard's ${file}`,
          description:
            'A page for operators and tenants over this API (docs/operations.md, "The dashboard").',
          operationId: OPERATION_IDS[file],
          tags: ['service'],
          response: {
            200: { description: file, content: { [type.split(';')[0]!]: { schema: { type: 'string' } } } },
          },
        },
        config: { auth: 'none' },
      },
      async (_request, reply) => pageHeaders(reply, type).send(body),
    );
  }
}
