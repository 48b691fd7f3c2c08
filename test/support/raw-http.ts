import { connect } from 'node:net';

/**
 * Writes `text` (then `body`) in one go on a new connection to the local server on `port`; everything
 * that came back until the server closed it, and when. For what a client like fetch cannot send:
 * pipelined requests, methods and heads Node's parser refuses, Expect.
 */
export function exchange(
  port: number,
  text: string,
  body?: Buffer,
): Promise<{ raw: string; closedAfter: number }> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => {
      socket.write(text);
      if (body) socket.write(body);
    });
    let raw = '';
    socket.on('data', (chunk) => (raw += chunk.toString()));
    socket.on('error', reject);
    socket.setTimeout(10_000, () => socket.destroy());
    socket.on('close', () => resolve({ raw, closedAfter: Date.now() - started }));
  });
}

export interface RawAnswer {
  status: number;
  /** Lower-case names. */
  headers: Record<string, string>;
  body: { error: { status: number; code: string; message: string; details: unknown[] }; requestId: string };
}

/** The answers in `raw`, in order (Content-Length or chunked bodies, each the JSON error shape). */
export function rawAnswers(raw: string): RawAnswer[] {
  const out: RawAnswer[] = [];
  let rest = raw;
  while (rest.length > 0) {
    const end = rest.indexOf('\r\n\r\n');
    if (!rest.startsWith('HTTP/1.1 ') || end < 0) throw new Error(`not an answer: ${rest.slice(0, 200)}`);
    const [statusLine, ...fields] = rest.slice(0, end).split('\r\n');
    rest = rest.slice(end + 4);
    const headers: Record<string, string> = {};
    for (const field of fields) {
      const colon = field.indexOf(':');
      headers[field.slice(0, colon).toLowerCase()] = field.slice(colon + 1).trim();
    }
    let body = '';
    if (headers['content-length'] !== undefined) {
      body = rest.slice(0, Number(headers['content-length']));
      rest = rest.slice(body.length);
    } else {
      for (;;) {
        const line = rest.indexOf('\r\n');
        const size = parseInt(rest.slice(0, line), 16);
        body += rest.slice(line + 2, line + 2 + size);
        rest = rest.slice(line + 2 + size + 2);
        if (!size) break;
      }
    }
    out.push({
      status: Number(statusLine!.slice(9, 12)),
      headers,
      body: JSON.parse(body) as RawAnswer['body'],
    });
  }
  return out;
}
