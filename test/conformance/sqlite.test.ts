/**
 * The store conformance suite on SQLite: a fresh database file in a temp folder per case, its
 * clock a `FakeClock`. No case is skipped.
 */
import { sqliteFixture } from './sqlite-fixture.js';
import { describeStoreConformance } from './store-suite.js';

describeStoreConformance('sqlite', sqliteFixture);
