import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Every file's temporary files go, whatever the test left (test/support/*-tmpdir.ts).
    globalSetup: ['test/support/global-tmpdir.ts'],
    setupFiles: ['test/support/private-tmpdir.ts'],
    // Each file gets its own process: handlers memoise one container per process, like Lambda.
    pool: 'forks',
    // The S3-protocol server (s3rver) makes its list continuation tokens with DES, which OpenSSL 3 has
    // only in its legacy provider: a list past 1,000 keys answered 500 in a run without npm test's
    // NODE_OPTIONS (`npx vitest run <file>`).
    execArgv: ['--openssl-legacy-provider'],
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    env: { LOG_LEVEL: 'silent', AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
    reporters: ['default', ['json', { outputFile: 'test-results/vitest.json' }]],
  },
});
