/**
 * @module sluice/testing
 * Tools to prove the guarantees in your own tests: a provider stub with the seed's contract
 * (in-process and over HTTP), a client that classifies its outcomes, a fake clock, and the
 * failpoints at crash windows C0–C4.
 */

export {
  CRASH_POINTS,
  type FailpointAction,
  type FailpointInfo,
  type FailpointName,
  type FailpointSpec,
  failpoints,
  isSimulatedCrash,
  SimulatedCrash,
} from '../runtime/failpoints.js';
export { FakeClock } from './fake-clock.js';
export { ProviderClient } from './provider-client.js';
export { type ProviderServer, type ProviderServerOptions, startProviderServer } from './provider-server.js';
export {
  type Charge,
  type FailureMode,
  ProviderStub,
  type ProviderStubOptions,
  type Refund,
} from './provider-stub.js';
