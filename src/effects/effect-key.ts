/**
 * @module effects/effect-key
 * The provider idempotency key of an effect, derived from (tenant, operation id, effect name)
 * and nothing else: the same on every attempt, every worker, every deployment, forever. It is
 * built from the server's own identity of the operation, never from a client-chosen value alone
 * (the tenant scopes it), and it is short and URL-safe so every provider accepts it (Stripe: up to
 * 255 characters).
 *
 * That identity is unique within a store, not across stores: two whose effects reach one provider
 * account (staging and production on one test account, two applications, a store started afresh)
 * would derive one key for two operations that share a tenant and id, and the provider would
 * answer the second with the first's effect. An engine given a namespace derives its keys from it
 * too (`namespacedEffectKey`).
 */
import { createHash } from 'node:crypto';

export type EffectKeyFn = (tenant: string, id: string, effect: string) => string;

/** `sk_` + base64url(SHA-256(JSON [tenant, id, effect])): 46 characters. */
export const deriveEffectKey: EffectKeyFn = (tenant, id, effect) =>
  `sk_${createHash('sha256')
    .update(JSON.stringify([tenant, id, effect]))
    .digest('base64url')}`;

/** The longest effect-key namespace. */
export const MAX_KEY_NAMESPACE_CHARS = 200;

/** `sk_` + base64url(SHA-256(JSON [namespace, tenant, id, effect])): 46 characters. */
export function namespacedEffectKey(namespace: string): EffectKeyFn {
  return (tenant, id, effect) =>
    `sk_${createHash('sha256')
      .update(JSON.stringify([namespace, tenant, id, effect]))
      .digest('base64url')}`;
}
