import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/**
 * Stopping `npm start` as a terminal or a supervisor does: the running import pauses at its next
 * checkpoint and the server exits cleanly, even when the signal comes twice (the terminal signals the
 * whole process group and npm forwards its own copy; the second signal used to find no handler left
 * and end the process on the spot, and the tsx runner's relay could kill it before it paused).
 */
describe('stopping the local server', () => {
  let images: Server;
  let imageBase: string;
  let dataDir: string;
  const token = 'local-stop-admin-token-0123456789';

  beforeAll(async () => {
    // Slow images, so that the import is still running when the signal comes
    const jpeg = await sharp({ create: { width: 64, height: 64, channels: 3, background: '#3a7' } })
      .jpeg()
      .toBuffer();
    images = createServer((_request, response) => {
      setTimeout(() => response.writeHead(200, { 'content-type': 'image/jpeg' }).end(jpeg), 150);
    });
    await new Promise<void>((resolve) => images.listen(0, '127.0.0.1', resolve));
    imageBase = `http://127.0.0.1:${(images.address() as AddressInfo).port}`;
    dataDir = mkdtempSync(join(tmpdir(), 'vps-local-stop-'));
  });

  afterAll(async () => {
    await new Promise<void>((resolve) => images.close(() => resolve()));
    rmSync(dataDir, { recursive: true, force: true });
  });

  afterAll(() => {
    // A server left behind by a failed test (npm gone, node orphaned) must not outlive the run.
    const pid = Number(readFileSyncOrEmpty(join(dataDir, 'server.pid')));
    if (pid > 0) process.kill(pid, 'SIGKILL');
  });

  /** `npm start` as a user runs it, its output collected; resolves with the server's URL. */
  function startServer(): { child: ChildProcess; output: () => string; url: Promise<string> } {
    let output = '';
    const child = spawn('npm', ['start'], {
      env: {
        ...process.env,
        PORT: '0',
        DATA_DIR: dataDir,
        ADMIN_TOKEN: token,
        DEMO_SEED: 'false',
        LOG_LEVEL: 'info',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const url = new Promise<string>((resolve, reject) => {
      const read = (chunk: Buffer) => {
        output += chunk.toString();
        const found = /running at (http:\/\/\S+)/.exec(output);
        if (found) resolve(found[1]!);
      };
      child.stdout!.on('data', read);
      child.stderr!.on('data', read);
      child.once('exit', () => reject(new Error(`The server exited before it was ready:\n${output}`)));
    });
    return { child, output: () => output, url };
  }

  it('pauses the running import and exits cleanly on a doubled SIGTERM', async () => {
    const server = startServer();
    const base = await server.url;
    const admin = (method: string, path: string, body?: unknown) =>
      fetch(`${base}${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        ...(body ? { body: JSON.stringify(body) } : {}),
      }).then(async (response) => ({ status: response.status, body: await response.json() }));
    await admin('POST', '/admin/v1/feeds', { feedId: 'stop-shop', name: 'Stop shop' });
    const content = Array.from({ length: 200 }, (_, i) =>
      JSON.stringify({
        id: `p${i}`,
        title: `Product ${i}`,
        image_link: `${imageBase}/p${i}.jpg`,
        price: '1 EUR',
      }),
    ).join('\n');
    const started = await admin('POST', '/admin/v1/feeds/stop-shop/imports', { format: 'jsonl', content });
    expect(started.status).toBe(202);
    const importPath = `/admin/v1/feeds/stop-shop/imports/${started.body.importId}`;
    for (let i = 0; i < 100 && (await admin('GET', importPath)).body.processed === 0; i += 1)
      await new Promise((resolve) => setTimeout(resolve, 100));

    // Act: SIGTERM to npm alone, twice (a supervisor stopping it; npm forwards each to the server, which
    // `exec` makes its direct child: through a shell, the server was orphaned and ran on)
    const exited = new Promise<number | null>((resolve) =>
      server.child.once('exit', (code) => resolve(code)),
    );
    server.child.kill('SIGTERM');
    setTimeout(() => server.child.kill('SIGTERM'), 20);
    const code = await exited;

    // Assess: a clean exit after the pause, the pid file gone (a restart sees no crash)
    expect(code, server.output()).toBe(0);
    expect(server.output()).toContain('"message":"import paused"');
    expect(existsSync(join(dataDir, 'server.pid'))).toBe(false);
  }, 90_000);
});

function readFileSyncOrEmpty(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}
