import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Suites that start moto's server or deploy the stack share one emulator per file;
    // two cores cannot run many of them at once without skewing the timing-scaled stand-ins.
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 240_000,
    allowOnly: false,
  },
});
