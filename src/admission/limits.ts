/**
 * @module admission/limits
 * Admission limits per workload class and tenant, resolved from configuration. Everything here
 * is checked before work is accepted, and enforced by the store across all processes (the
 * counters live in the database, not in any one process).
 *
 * Resolution for (class, tenant), most specific first:
 *   tenants[tenant][class] → tenants[tenant]['*'] → classes[class].tenant → DEFAULT_TENANT_LIMITS
 */
import { bounded, knownKeys } from '../core/bounds.js';
import { InvalidArgument } from '../core/errors/index.js';

export interface TenantLimits {
  /** Operations of this tenant in this class that may run at once, across all processes. `null`: no cap. */
  maxRunning?: number | null;
  /** Operations of this tenant in this class that may wait; beyond it submits are refused. `null`: no cap. */
  maxWaiting?: number | null;
  /** Share of the class's claims relative to other tenants. Default 1. */
  weight?: number;
}

export interface ClassConfig {
  /** Waiting operations of the class, all tenants together, before submits are refused. `null`: no cap. */
  maxQueued?: number | null;
  /** Per-tenant limits in this class unless a tenant overrides them. */
  tenant?: TenantLimits;
}

/** Per-tenant overrides: by class name, or `'*'` for every class. */
export type TenantConfig = Record<string, TenantLimits>;

export interface AdmissionConfig {
  classes?: Record<string, ClassConfig>;
  tenants?: Record<string, TenantConfig>;
}

export interface ResolvedTenantLimits {
  maxRunning: number | null;
  maxWaiting: number | null;
  weight: number;
}

/** Defaults a serious deployment can live with: the store cannot be flooded without bound. */
export const DEFAULT_TENANT_LIMITS: ResolvedTenantLimits = {
  maxRunning: null,
  maxWaiting: 10_000,
  weight: 1,
};
export const DEFAULT_MAX_QUEUED = 100_000;

/** A tenant's share of its class's claims, relative to others', within a million to one. */
export const MIN_WEIGHT = 0.001;
export const MAX_WEIGHT = 1000;

/** The largest cap: the stores keep caps and counts as 32-bit integers. */
const MAX_CAP = 2 ** 31 - 1;

function checkCap(where: string, value: number | null | undefined): void {
  if (value !== null) bounded(where, value, 0, { min: 0, max: MAX_CAP, integer: true });
}

const LIMIT_KEYS = ['maxRunning', 'maxWaiting', 'weight'] as const satisfies ReadonlyArray<
  keyof TenantLimits
>;
const CLASS_KEYS = ['maxQueued', 'tenant'] as const satisfies ReadonlyArray<keyof ClassConfig>;

function checkLimits(where: string, l: TenantLimits | undefined): void {
  if (l === undefined) return;
  knownKeys(where, l, LIMIT_KEYS);
  checkCap(`${where}.maxRunning`, l.maxRunning);
  checkCap(`${where}.maxWaiting`, l.maxWaiting);
  // Bounded: a claim advances its tenant's virtual time by 1 / weight. Past 2^53 (a weight of
  // 1e-20) adding 1 changes nothing and every tenant of the class ties for good, and PostgreSQL
  // overflows its double (1e-320), which fails every claim of the class.
  if (
    l.weight !== undefined &&
    !(Number.isFinite(l.weight) && l.weight >= MIN_WEIGHT && l.weight <= MAX_WEIGHT)
  ) {
    throw new InvalidArgument(`${where}.weight must be a number from ${MIN_WEIGHT} to ${MAX_WEIGHT}`);
  }
}

/**
 * Every class's and tenant's limits in range and spelled as known, or `InvalidArgument` naming
 * the first that is not: a misspelled cap left unread would leave the tenant uncapped.
 */
export function validateAdmission(config: AdmissionConfig): void {
  for (const [cls, c] of Object.entries(config.classes ?? {})) {
    knownKeys(`classes.${cls}`, c, CLASS_KEYS);
    checkCap(`classes.${cls}.maxQueued`, c.maxQueued);
    checkLimits(`classes.${cls}.tenant`, c.tenant);
  }
  for (const [tenant, t] of Object.entries(config.tenants ?? {})) {
    knownKeys(`tenants.${tenant}`, t, Object.keys(t));
    for (const [cls, l] of Object.entries(t)) checkLimits(`tenants.${tenant}.${cls}`, l);
  }
}

export class Admission {
  /**
   * Resolved limits, per class for tenants with no configuration of their own and per (class,
   * tenant) for the configured ones: bounded by the configuration, never by the tenants a
   * long-running process has seen (tens of thousands come and go; one entry each was kept for
   * ever).
   */
  private readonly byClass = new Map<string, ResolvedTenantLimits>();
  private readonly byTenant = new Map<string, ResolvedTenantLimits>();

  constructor(private readonly config: AdmissionConfig = {}) {
    validateAdmission(config);
  }

  /** How many resolutions are cached (tests). */
  get cached(): number {
    return this.byClass.size + this.byTenant.size;
  }

  /** The limits of `tenant` in `cls`. */
  tenantLimits(cls: string, tenant: string): ResolvedTenantLimits {
    const tenants = this.config.tenants;
    const configured = tenants !== undefined && Object.hasOwn(tenants, tenant);
    const cache = configured ? this.byTenant : this.byClass;
    const cacheKey = configured ? `${cls}\u0000${tenant}` : cls;
    let resolved = cache.get(cacheKey);
    if (!resolved) {
      const layers = [
        DEFAULT_TENANT_LIMITS,
        this.config.classes?.[cls]?.tenant,
        configured ? tenants[tenant]?.['*'] : undefined,
        configured && Object.hasOwn(tenants[tenant] ?? {}, cls) ? tenants[tenant]?.[cls] : undefined,
      ];
      resolved = { ...DEFAULT_TENANT_LIMITS };
      for (const layer of layers) {
        if (!layer) continue;
        if (layer.maxRunning !== undefined) resolved.maxRunning = layer.maxRunning;
        if (layer.maxWaiting !== undefined) resolved.maxWaiting = layer.maxWaiting;
        if (layer.weight !== undefined) resolved.weight = layer.weight;
      }
      cache.set(cacheKey, resolved);
    }
    return resolved;
  }

  /** The class's global bound on waiting operations. */
  maxQueued(cls: string): number | null {
    const v = this.config.classes?.[cls]?.maxQueued;
    return v === undefined ? DEFAULT_MAX_QUEUED : v;
  }
}
