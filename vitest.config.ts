import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', 'src/**/*.test.ts'],
    // Forks: native modules, real signals to child processes, and one failpoint registry per file.
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
