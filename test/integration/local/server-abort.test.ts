import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startHttpServer } from '#lib/local/server.ts';
import { recordingLogger } from '#test/support/recording-logger.ts';

const lines: { level: string; message: string; fields?: Record<string, unknown> }[] = [];
let url: URL;
let close: () => Promise<void>;

beforeAll(async () => {
  const { server, url: address } = await startHttpServer({
    port: 0,
    maxBodyBytes: 1_000_000,
    logger: recordingLogger(lines, { fields: true }),
  });
  url = new URL(address);
  close = () => new Promise((resolve) => server.close(() => resolve()));
});

afterAll(async () => {
  await close?.();
});

describe('local HTTP server', () => {
  it('logs a client that leaves part way through its body as such, not as a server failure', async () => {
    // Act: announce 1,000 bytes, send 10, hang up.
    await new Promise<void>((resolve, reject) => {
      const socket = connect(Number(url.port), url.hostname, () => {
        socket.write(
          'POST /api/v1/search/image?searchId=vps_querysecret&x=1 HTTP/1.1\r\nHost: x\r\n' +
            'Content-Type: application/json\r\n' +
            'Content-Length: 1000\r\n\r\n{"imageDa',
          () => setTimeout(() => socket.destroy(), 50),
        );
      });
      socket.on('close', () => resolve());
      socket.on('error', reject);
    });
    await new Promise((resolve) => setTimeout(resolve, 200));

    // Assert
    expect(lines.filter((line) => line.level === 'error')).toEqual([]);
    expect(lines).toContainEqual({
      level: 'info',
      message: 'request aborted by the client',
      // The path alone: not the query, which may carry a search id
      fields: { method: 'POST', path: '/api/v1/search/image' },
    });
    expect(JSON.stringify(lines)).not.toContain('querysecret');
  });
});
