/** @module core/errors — every error Sluice raises; codes are listed in docs/errors.md. */
export * from './budget-errors.js';
export * from './capacity-errors.js';
export * from './codes.js';
export * from './input-errors.js';
export * from './interruptions.js';
export * from './operation-errors.js';
export * from './outcomes.js';
export * from './sluice-error.js';
export * from './store-errors.js';
