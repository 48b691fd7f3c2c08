import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { dirname, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { deflate, gzip } from 'node:zlib';
import type { APIGatewayProxyEvent, APIGatewayProxyResult, Context } from 'aws-lambda';
import { DomainError } from '#lib/domain/errors.ts';
import { answerCoding, type ContentCoding } from '#lib/http/compression.ts';
import {
  ALLOWED_REQUEST_HEADERS,
  EXPOSED_HEADERS,
  PREFLIGHT_MAX_AGE_SECONDS,
  PREFLIGHT_METHODS,
} from '#lib/http/cors.ts';
import { type ErrorBody, toErrorBody } from '#lib/http/errors.ts';
import { stringHeaders } from '#lib/http/responses.ts';
import { matchRoute, type Route, type RouteMatch } from '#lib/http/routes.ts';
import { toLambdaContext, toProxyEvent } from '#lib/local/api-gateway-event.ts';
import { serveDemoFile } from '#lib/local/demo-files.ts';
import { isPagePath, serveStatic } from '#lib/local/static.ts';
import { type Logger, redactPath } from '#lib/log.ts';

type LambdaHandler = (event: APIGatewayProxyEvent, context: Context) => Promise<APIGatewayProxyResult>;

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const UTF8 = new TextDecoder('utf-8', { fatal: true });
/** The gateway's codings (CONTENT_CODINGS); `deflate` is the zlib format, as RFC 9110 §8.4.1.2 names it. */
const COMPRESS: Record<ContentCoding, (data: Buffer) => Promise<Buffer>> = {
  gzip: promisify(gzip),
  deflate: promisify(deflate),
};
/** JSON media types, as the handlers' body parser (@middy/http-json-body-parser) accepts them. */
const JSON_MEDIA_TYPE = /^application\/(.+\+)?json\s*($|;)/i;

/**
 * A preflight's answer, the same for every origin, as the gateway's (its mock integration for
 * `Cors.ALL_ORIGINS` answers `*`, infra/stacks/api-stack.ts): it echoed the caller's Origin, with no
 * `Vary: Origin`, so a shared cache could give one origin's preflight to another. Which origins may use a
 * search id is the domain check's job; the API takes no credentials, so `*` allows no more than the echo.
 * The gateway's methods too (PREFLIGHT_METHODS): the local server allowed GET, PATCH and DELETE as well,
 * so a page written against it would meet the deployed API's narrower answer only there.
 */
const CORS_HEADERS = {
  'Access-Control-Allow-Origin': '*',
  'Access-Control-Allow-Methods': PREFLIGHT_METHODS.join(','),
  'Access-Control-Allow-Headers': ALLOWED_REQUEST_HEADERS.join(','),
  'Access-Control-Max-Age': String(PREFLIGHT_MAX_AGE_SECONDS),
};

/**
 * Serves the route table over HTTP the way API Gateway would: each request becomes a REST proxy event
 * for the route's Lambda handler, loaded from the same module the CDK stack deploys.
 */
export async function startHttpServer(options: {
  port: number;
  host?: string;
  maxBodyBytes: number;
  logger: Logger;
}): Promise<{ server: Server; url: string }> {
  const handlers = new Map<Route, Promise<LambdaHandler>>();
  const load = (route: Route) => {
    let handler = handlers.get(route);
    if (!handler) {
      handler = import(pathToFileURL(resolve(ROOT, route.entry)).href).then((module) => {
        const fn = (module as Record<string, unknown>)[route.handler];
        if (typeof fn !== 'function') throw new Error(`${route.entry} has no export ${route.handler}`);
        return fn as LambdaHandler;
      });
      handlers.set(route, handler);
    }
    return handler;
  };

  // Per socket, the responses not yet done: a refused request pipelined behind them waits for them.
  const unanswered = new WeakMap<Duplex, Set<ServerResponse>>();

  const track = (request: IncomingMessage, response: ServerResponse) => {
    const pending = unanswered.get(request.socket) ?? new Set<ServerResponse>();
    unanswered.set(request.socket, pending);
    pending.add(response);
    // ('close' follows 'finish' and also comes when the socket goes first: one event for both.)
    response.once('close', () => pending.delete(response));
  };

  /**
   * The access-log line of an answer of the server's own, as the handlers' middleware writes one for theirs
   * (lib/http/middleware.ts: requestId, method, path, status, code, ms), so that the request id a client
   * quotes is found in the log. The path without its query, search ids redacted, no headers, no body.
   */
  const logAnswer = (
    body: ErrorBody,
    fields: { method?: string; path?: string; startedAt?: number; error?: string },
  ) =>
    options.logger.info('request', {
      requestId: body.requestId,
      method: fields.method,
      path: fields.path,
      status: body.error.status,
      code: body.error.code,
      ...(fields.startedAt === undefined ? {} : { ms: Date.now() - fields.startedAt }),
      ...(fields.error === undefined ? {} : { error: fields.error }),
    });

  /** Answers `error` in the one shape (`status`: another than its code's) and logs the answer. */
  const answerError = (
    request: IncomingMessage,
    response: ServerResponse,
    startedAt: number,
    error: unknown,
    headers: Record<string, string>,
    status?: number,
  ) => {
    const body = sendError(response, error, headers, status);
    logAnswer(body, { method: request.method, path: loggedPath(request.url), startedAt });
    return body;
  };

  // Host-less HTTP/1.1 requests reach the handler too (Node would answer them a bodiless 400 itself).
  const server = createServer({ requireHostHeader: false }, (request, response) => {
    const startedAt = Date.now();
    track(request, response);
    handle(request, response, startedAt).catch((error: unknown) => {
      // A client that goes away part way through its body is no failure of ours: nobody is left to answer.
      // (`complete`: the whole body arrived; `destroyed` is also true once a body was read to its end.)
      if (!request.complete || (error as { code?: string } | null)?.code === 'ECONNRESET') {
        // The path alone: the query may carry anything, and no search id (redactPath).
        options.logger.info('request aborted by the client', {
          method: request.method,
          path: loggedPath(request.url),
        });
        response.destroy();
        return;
      }
      const headers = gatewayHeaders(requestUrl(request.url)?.pathname ?? '/');
      const answer = response.headersSent
        ? undefined
        : answerError(request, response, startedAt, new Error('internal'), headers);
      options.logger.error('local server failure', {
        requestId: answer?.requestId,
        error: error instanceof Error ? error.message : String(error),
      });
      if (!answer) response.destroy();
    });
  });

  // An expectation other than 100-continue (`Expect: 200-ok`, RFC 9110 §10.1.1): Node answered it a bare
  // 417 itself (no body, no request id, no log line). Refused in the one shape, at once, before any body:
  // the body is read and dropped (a connection closed with it unread is a reset, and the client lost the
  // answer), the connection kept for a next request if the body ends within DRAIN_MS, closed otherwise.
  server.on('checkExpectation', (request: IncomingMessage, response: ServerResponse) => {
    const startedAt = Date.now();
    track(request, response);
    const error = new DomainError(
      'invalid_request',
      'The only expectation this server meets is Expect: 100-continue.',
    );
    answerError(
      request,
      response,
      startedAt,
      error,
      gatewayHeaders(requestUrl(request.url)?.pathname ?? '/'),
      417,
    );
    request.once('end', destroyAfterDrain(request.socket));
    request.resume();
  });

  // Requests Node's parser refuses (an unknown method, headers over its limit, malformed syntax) never
  // reach a handler: answer them in the one error shape too, rather than Node's bodiless default.
  const answered = new WeakSet<Duplex>();
  server.on('clientError', (error: Error & { code?: string }, socket) => {
    // The parser reads on while a refused client drains (drainBeforeClosing): one answer per socket.
    if (answered.has(socket)) return;
    answered.add(socket);
    if (!socket.writable) {
      socket.destroy();
      return;
    }
    const tooLarge = error.code === 'HPE_HEADER_OVERFLOW';
    afterEarlierAnswers(socket, () => {
      const body = writeRawError(
        socket,
        tooLarge ? 431 : 400,
        tooLarge ? 'Request Header Fields Too Large' : 'Bad Request',
        new DomainError(
          'invalid_request',
          tooLarge ? 'Request headers are too large.' : 'Malformed HTTP request.',
        ),
      );
      // (Nothing of the request is logged but the parser's error code: it did not parse.)
      if (body) logAnswer(body, { error: error.code });
    });
  });
  // CONNECT (a proxy tunnel) is no method of this API: answered like any other, not by closing the socket.
  // Its Allow names what another method's 405 there names; a target with no route (a proxy's host:port)
  // allows no method: an empty Allow (RFC 9110 §10.2.1).
  server.on('connect', (request: IncomingMessage, socket: Duplex) => {
    const startedAt = Date.now();
    const path = request.url?.startsWith('/') ? requestUrl(request.url)?.pathname : undefined;
    const allowed = path === undefined ? [] : allowedOn('CONNECT', path).allowed;
    afterEarlierAnswers(socket, () => {
      const body = writeRawError(
        socket,
        405,
        'Method Not Allowed',
        new DomainError('method_not_allowed', 'CONNECT is not a method of this server.'),
        { Allow: allowed.join(', ') },
      );
      if (body) logAnswer(body, { method: 'CONNECT', path, startedAt });
    });
  });

  /**
   * Writes a raw answer once the requests parsed whole before it on the socket (pipelined) have been
   * answered, as HTTP/1.1 orders answers (RFC 9112 §9.3.2): it used to be written, and the socket
   * closed, under them. A request still incomplete is the refused one itself (its body did not parse):
   * not waited for. Bound: the socket closes DRAIN_MS after the refusal whatever is in flight; a handler
   * slower than that loses its answer and the refusal's with it, rather than holding the socket.
   */
  function afterEarlierAnswers(socket: Duplex, answer: () => void): void {
    const earlier = [...(unanswered.get(socket) ?? [])].filter((response) => response.req.complete);
    if (earlier.length === 0) {
      answer();
      return;
    }
    // (Its own bound, ended when the answer is written: that starts the drain's full time, or a client
    // still sending when the earlier answers ended just inside the bound got a reset, not the answer.)
    const stopWaiting = destroyAfterDrain(socket);
    let left = earlier.length;
    for (const response of earlier) {
      response.once('close', () => {
        left -= 1;
        if (left > 0) return;
        stopWaiting();
        answer();
      });
    }
  }

  async function handle(request: IncomingMessage, response: ServerResponse, startedAt: number) {
    const method = request.method ?? 'GET';
    const url = requestUrl(request.url);
    // CORS preflights, as the public API's gateway answers them (and `OPTIONS *`, which asks about the
    // server as a whole, RFC 9110 §9.3.7). The admin API has none (infra/stacks/api-stack.ts): an OPTIONS
    // there is a method without a route like any other, and a browser's preflight fails.
    if (method === 'OPTIONS' && !(url && isAdminPath(url.pathname))) {
      response.writeHead(204, CORS_HEADERS);
      response.end();
      return;
    }
    if (!url) {
      return answerError(
        request,
        response,
        startedAt,
        new DomainError('invalid_request', 'The request target is not a path.'),
        gatewayHeaders('/'),
      );
    }
    // The dashboard, /openapi.json and /docs (GET/HEAD only; POST / stays the root search).
    if (await serveStatic(request, response, url)) return;
    if (await serveDemoFile(request, response, url)) return;
    const body = await readBody(request, options.maxBodyBytes);
    // After an over-size body (whatever the answer), the rest is not read: the connection closes once it
    // has been answered, rather than when readBody's drain ends, under a next request sent on it.
    const closing: Record<string, string> = body === undefined ? { Connection: 'close' } : {};
    const refuse = (error: DomainError, headers: Record<string, string> = {}) =>
      answerError(request, response, startedAt, error, {
        ...gatewayHeaders(url.pathname),
        ...closing,
        ...headers,
      });
    const { match, allowed } = allowedOn(method, url.pathname);
    if (!match) {
      if (allowed.length > 0) {
        return refuse(new DomainError('method_not_allowed', `Use ${allowed.join(', ')} on this path.`), {
          Allow: allowed.join(', '),
        });
      }
      return refuse(new DomainError('not_found', `No route for ${method} ${url.pathname}.`));
    }
    if (body === undefined) {
      return refuse(
        new DomainError('payload_too_large', `Request body exceeds ${options.maxBodyBytes} bytes.`),
      );
    }
    // API Gateway hands a Lambda the body as text; bytes that are not UTF-8 would become U+FFFD (three
    // bytes each) and could then read as an over-size body instead of what they are. Bytes sent as
    // something other than JSON (a raw image upload) are the media-type error the handler would give.
    let text: string | null = null;
    try {
      text = body.length > 0 ? UTF8.decode(body) : null;
    } catch {
      if (!JSON_MEDIA_TYPE.test(request.headers['content-type']?.trim() ?? '')) {
        return refuse(
          new DomainError(
            'unsupported_media_type',
            'Send the request body as JSON with Content-Type: application/json.',
          ),
        );
      }
      return refuse(new DomainError('invalid_request', 'The request body is not valid UTF-8.'));
    }
    const event = toProxyEvent(request, url, match, text);
    const context = toLambdaContext(`vps-local-${match.route.name}`, event.requestContext.requestId);
    const result = await (await load(match.route))(event, context);
    const headers: Record<string, string | string[]> = { ...stringHeaders(result.headers) };
    for (const [name, values] of Object.entries(result.multiValueHeaders ?? {}))
      headers[name] = values.map(String);
    // CORS headers of handler responses come from the middleware, as in AWS; only preflights are answered here.
    // (A HEAD answer's body is empty already: the middleware drops it, and Node sends none for HEAD.)
    let payload: Buffer = Buffer.from(result.body, result.isBase64Encoded ? 'base64' : 'utf8');
    // Compressed as the gateway compresses it: from COMPRESSION_MIN_BYTES (minCompressionSize), with the
    // coding it would choose. (Its Vary, Accept-Encoding included, is the middleware's, on every answer:
    // lib/http/cors.ts VARY. A HEAD answer's Content-Encoding is the middleware's too: its body is gone.)
    const coding = answerCoding(payload.length, request.headers['accept-encoding']);
    if (coding) {
      payload = await COMPRESS[coding](payload);
      headers['Content-Encoding'] = coding;
    }
    response.writeHead(result.statusCode, headers);
    response.end(payload);
  }

  await new Promise<void>((resolveListen, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host ?? '127.0.0.1', () => resolveListen());
  });
  const address = server.address() as AddressInfo;
  return { server, url: `http://${options.host ?? '127.0.0.1'}:${address.port}` };
}

/** A request target for a log line: its path, without the query, any search id in it redacted. */
function loggedPath(target: string | undefined): string | undefined {
  const path = requestUrl(target)?.pathname;
  return path === undefined ? undefined : redactPath(path);
}

/**
 * The request target as a URL on this server. An origin-form target ("/path?query") is read as a path
 * even when it starts with "//" (new URL would take what follows for a host, or throw: a 500, or no
 * answer at all); an absolute-form one (a proxy's "http://host/path") as given. Undefined otherwise.
 */
function requestUrl(target: string | undefined): URL | undefined {
  const raw = target ?? '/';
  let url: URL;
  try {
    url = raw.startsWith('/') ? new URL(`http://localhost${raw}`) : new URL(raw);
  } catch {
    return undefined;
  }
  // Repeated slashes are one, as the route table reads them: `//admin/...` is an admin path (its CORS).
  url.pathname = url.pathname.replace(/\/{2,}/g, '/');
  return url;
}

/**
 * The route `method` takes on `path`, if any, and the methods the path takes otherwise (a 405's Allow). A
 * page's path (the dashboard at /, /docs, /openapi.json, the demo feed) is GET and HEAD too. (Asset and
 * image paths are pages only where a file is: another method on them stays a 404.)
 */
function allowedOn(method: string, path: string): { match?: RouteMatch; allowed: string[] } {
  const { match, allowed } = matchRoute(method, path);
  const page = method !== 'GET' && method !== 'HEAD' && isPagePath(path);
  return { match, allowed: page ? [...new Set(['GET', 'HEAD', ...allowed])] : allowed };
}

/** A path of the admin API (deployed, an API of its own: infra/stacks/api-stack.ts). */
function isAdminPath(path: string): boolean {
  // (`/admin` itself too: it got the public preflight.)
  return path === '/admin' || path.startsWith('/admin/');
}

/**
 * An error in the one JSON shape written straight to a socket Node's HTTP layer did not hand us; its body,
 * or undefined when the socket could no longer be written.
 */
function writeRawError(
  socket: Duplex,
  status: number,
  reason: string,
  error: DomainError,
  headers: Record<string, string> = {},
): ErrorBody | undefined {
  if (!socket.writable) {
    socket.destroy();
    return undefined;
  }
  const requestId = randomUUID();
  const shape = toErrorBody(error, requestId);
  const body: ErrorBody = { ...shape, error: { ...shape.error, status } };
  const text = JSON.stringify(body);
  const extra = Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`);
  socket.end(
    `HTTP/1.1 ${status} ${reason}\r\n` +
      `Content-Type: application/json; charset=utf-8\r\nX-Request-Id: ${requestId}\r\n${extra.join('')}` +
      `Content-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`,
  );
  drainBeforeClosing(socket);
  return body;
}

/** How long a refused request may go on sending before its socket is closed regardless. */
const DRAIN_MS = 2_000;

/**
 * Lets the client finish sending before the socket closes. Closing a socket with unread bytes makes the
 * kernel answer a reset, so a client that writes its whole request before reading (a 1 MB request line
 * over a raw socket) got ECONNRESET instead of the error: Node's parser reads on after refusing, each
 * further chunk was another `clientError`, and answering that one again destroyed the socket (now ignored
 * for an answered socket). The timer bounds a client that never stops.
 */
function drainBeforeClosing(socket: Duplex): void {
  destroyAfterDrain(socket);
  socket.on('end', () => socket.destroy());
  socket.resume();
}

/** Closes the socket once DRAIN_MS have passed, unless it closes before; the answer cancels that. */
function destroyAfterDrain(socket: Duplex): () => void {
  const timer = setTimeout(() => socket.destroy(), DRAIN_MS);
  timer.unref();
  const cancel = () => clearTimeout(timer);
  socket.once('close', cancel);
  return () => {
    cancel();
    socket.off('close', cancel);
  };
}

/**
 * CORS headers of the server's own errors, as the gateway's own: on the public API an allow-origin header,
 * so that a browser can read them (infra/stacks/api-stack.ts), none on the admin API (whose gateway
 * answers no preflight either: see `handle`). They expose what the handlers' answers expose, or a browser
 * could not read their request id (the gateway's responses do not yet: docs/deploy.md "Teardown and known
 * limits"). (The handlers' own answers, admin ones included, name the calling origin themselves, from the
 * shared middleware (lib/http/cors.ts), deployed as here; without a preflight a browser cannot send the
 * admin API's Authorization cross-origin.) No Vary, as the gateway's name none: the same answer for every
 * origin, never compressed (README, and the 413 of the OpenAPI document, say so).
 */
function gatewayHeaders(path: string): Record<string, string> {
  if (isAdminPath(path)) return {};
  return { 'Access-Control-Allow-Origin': '*', 'Access-Control-Expose-Headers': EXPOSED_HEADERS };
}

/**
 * Reads the body; undefined as soon as it exceeds the limit. The rest is read and dropped while the 413 is
 * sent (a client that writes its whole body before reading would otherwise get a reset), for at most
 * DRAIN_MS: the whole body used to be read first, 13.8 GB in 6 s from a client that kept sending, until
 * Node's 300-s request timeout.
 */
function readBody(request: IncomingMessage, limit: number): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= limit) {
        chunks.push(chunk);
        return;
      }
      request.off('data', onData);
      request.resume();
      destroyAfterDrain(request.socket);
      resolve(undefined);
    };
    request.on('data', onData);
    request.once('end', () => resolve(Buffer.concat(chunks)));
    request.once('error', reject);
  });
}

/** Answers `error` in the one shape, with `status` instead of its code's if given (a 417); its body. */
function sendError(
  response: ServerResponse,
  error: unknown,
  headers: Record<string, string> = {},
  status?: number,
): ErrorBody {
  const requestId = randomUUID();
  const shape = toErrorBody(error, requestId);
  const body: ErrorBody = status === undefined ? shape : { ...shape, error: { ...shape.error, status } };
  response.writeHead(body.error.status, {
    'Content-Type': 'application/json; charset=utf-8',
    'X-Request-Id': requestId,
    ...headers,
  });
  response.end(JSON.stringify(body));
  return body;
}
