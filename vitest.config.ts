import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', 'src/**/*.test.ts'],
    // Forks: native modules, real signals to child processes, and one failpoint registry per file.
    pool: 'forks',
    // Two files at a time on the two cores CI has (the default leaves one idle): most files wait
    // on PostgreSQL, child processes or timers, not on the CPU. The whole suite took 560 s one
    // file at a time and 463 s two at a time on the same machine, every file passing both ways.
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
