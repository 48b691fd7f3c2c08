import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { EXPOSED_HEADERS } from '#lib/http/cors.ts';
import { recordingLogger } from '#test/support/recording-logger.ts';

// Fault injection: every request matches a route whose handler module does not exist, so the server
// fails after it has read the whole body.
vi.mock('#lib/http/routes.ts', () => ({
  matchRoute: () => ({
    match: {
      route: {
        name: 'Broken',
        method: 'POST',
        path: '/broken',
        entry: 'functions/does-not-exist.ts',
        handler: 'handler',
        access: 'public',
      },
      pathParameters: {},
    },
    allowed: [],
  }),
}));

const lines: { level: string; message: string }[] = [];
const logger = recordingLogger(lines);

let url: string;
let close: () => Promise<void>;

beforeAll(async () => {
  const { startHttpServer } = await import('#lib/local/server.ts');
  const started = await startHttpServer({ port: 0, maxBodyBytes: 1_000_000, logger });
  url = started.url;
  close = () => new Promise((resolve) => started.server.close(() => resolve()));
});

afterAll(async () => {
  await close?.();
});

describe('local HTTP server failures', () => {
  it('answers a failure of its own after the body was read with the 500 error shape, logged as an error', async () => {
    const response = await fetch(`${url}/broken`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"imageData":"x"}',
    });

    expect(response.status).toBe(500);
    expect(await response.json()).toMatchObject({ error: { status: 500, code: 'internal' } });
    // Readable by a browser like the server's other errors on a public path, its request id included.
    expect(response.headers.get('access-control-allow-origin')).toBe('*');
    expect(response.headers.get('access-control-expose-headers')).toBe(EXPOSED_HEADERS);
    expect(lines).toContainEqual({ level: 'error', message: 'local server failure' });
    expect(lines.filter((line) => line.message === 'request aborted by the client')).toEqual([]);
  });
});
