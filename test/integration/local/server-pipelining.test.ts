import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type * as Static from '#lib/local/static.ts';
import { exchange as exchangeWith, rawAnswers } from '#test/support/raw-http.ts';
import { recordingLogger } from '#test/support/recording-logger.ts';

// Fault injection: GET /hang is a page that is never served, a handler that does not end; GET /slow one
// that is looked up for 1.5 s (then not found).
vi.mock('#lib/local/static.ts', async (importOriginal) => {
  const actual = await importOriginal<typeof Static>();
  const later = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
  return {
    ...actual,
    serveStatic: (...args: Parameters<typeof actual.serveStatic>) =>
      args[2].pathname === '/hang'
        ? new Promise<boolean>(() => undefined)
        : args[2].pathname === '/slow'
          ? later(1_500).then(() => actual.serveStatic(...args))
          : actual.serveStatic(...args),
  };
});

const lines: { level: string; message: string }[] = [];
let port: number;
let close: () => Promise<void>;

beforeAll(async () => {
  const { startHttpServer } = await import('#lib/local/server.ts');
  const { server, url } = await startHttpServer({
    port: 0,
    maxBodyBytes: 1_000_000,
    logger: recordingLogger(lines),
  });
  port = Number(new URL(url).port);
  close = () => new Promise((resolve) => server.close(() => resolve()));
});

afterAll(async () => {
  await close?.();
});

const exchange = (text: string) => exchangeWith(port, text);

/** The answers in `raw`, in order: each one's status and error code. */
const answers = (raw: string) =>
  rawAnswers(raw).map((answer) => ({ status: answer.status, code: answer.body.error.code }));

const ANSWERED = 'GET /api/v1/nothing HTTP/1.1\r\nHost: x\r\n\r\n';

describe('local HTTP server, pipelined requests', () => {
  it.each([
    ['an unknown method', 'FOO / HTTP/1.1\r\nHost: x\r\n\r\n', 400],
    ['a malformed request line', 'GET /a b HTTP/1.1\r\nHost: x\r\n\r\n', 400],
    ['a header name with a space', 'GET / HTTP/1.1\r\nHost: x\r\nBad Name: 1\r\n\r\n', 400],
    ['headers over 16 KB', `GET / HTTP/1.1\r\nHost: x\r\nX-Filler: ${'x'.repeat(20_000)}\r\n\r\n`, 431],
  ])(
    'answers a request followed by %s in order: its own answer, then the refusal',
    async (_, refused, status) => {
      // Act: both requests in one write, before any answer is read.
      const { raw } = await exchange(ANSWERED + refused);

      // Assert
      expect(answers(raw)).toEqual([
        { status: 404, code: 'not_found' },
        { status, code: 'invalid_request' },
      ]);
    },
  );

  it('answers a request followed by a CONNECT in order: its own answer, then the 405', async () => {
    const { raw } = await exchange(`${ANSWERED}CONNECT x:1 HTTP/1.1\r\nHost: x\r\n\r\n`);

    expect(answers(raw)).toEqual([
      { status: 404, code: 'not_found' },
      { status: 405, code: 'method_not_allowed' },
    ]);
  });

  it('answers every request parsed before the refused one, in order', async () => {
    const { raw } = await exchange(ANSWERED + ANSWERED + 'FOO / HTTP/1.1\r\n\r\n');

    expect(answers(raw).map((answer) => answer.status)).toEqual([404, 404, 400]);
  });

  it('answers a request whose own body does not parse at once, not after waiting for it', async () => {
    const { raw } = await exchange(
      'POST /api/v1/nothing HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nnot a chunk\r\n',
    );

    expect(answers(raw)).toEqual([{ status: 400, code: 'invalid_request' }]);
  });

  it('gives a client still sending after a slow earlier answer the whole drain, not what its wait left', async () => {
    // Prepare: a request answered after 1.5 s, a refused one behind it, and a client that goes on
    // sending until 2.7 s, then ends its side (the drain's 2 s counted from the refusal ended at 2 s).
    const started = Date.now();
    const outcome = await new Promise<{ raw: string; closedAfter: number }>((resolve, reject) => {
      let raw = '';
      // (Half-open allowed: a client writing its whole request before it reads goes on past the answer.)
      const socket = connect({ port, host: '127.0.0.1', allowHalfOpen: true }, () => {
        socket.write('GET /slow HTTP/1.1\r\nHost: x\r\n\r\nFOO / HTTP/1.1\r\n\r\n');
        const sending = setInterval(() => {
          if (Date.now() - started < 2_700) socket.write('more of the refused request ');
          else {
            clearInterval(sending);
            socket.end();
          }
        }, 100);
        socket.on('close', () => clearInterval(sending));
      });
      socket.on('data', (chunk) => (raw += chunk.toString()));
      socket.on('error', reject);
      socket.on('close', () => resolve({ raw, closedAfter: Date.now() - started }));
    });

    // Assess: both answers, and the connection open until the client ended it
    expect(answers(outcome.raw).map((answer) => answer.status)).toEqual([404, 400]);
    expect(outcome.closedAfter).toBeGreaterThanOrEqual(2_600);
  });

  it('closes the connection within seconds when the request before a refused one is never answered', async () => {
    // The refusal waits for the answer before it, but no longer than the drain's bound (2 s).
    const { raw, closedAfter } = await exchange(
      'GET /hang HTTP/1.1\r\nHost: x\r\n\r\nFOO / HTTP/1.1\r\n\r\n',
    );

    expect(raw).toBe('');
    expect(closedAfter).toBeLessThan(5_000);
  });
});
