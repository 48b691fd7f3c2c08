import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { BlockList, isIP, type LookupFunction } from 'node:net';
import { FetchError } from '#lib/domain/catalogue/imports.ts';
import type { FetchLimits, ImageFetcher } from '#lib/ports.ts';

/** The message of a fetch its caller stopped (an import paused, or its feed deleted). */
const STOPPED = 'stopped.';

/** A BlockList of subnets given as [network, prefix length] (IPv6 where the network has a colon). */
function subnets(list: readonly (readonly [string, number])[]): BlockList {
  const blocks = new BlockList();
  for (const [net, prefix] of list) blocks.addSubnet(net, prefix, net.includes(':') ? 'ipv6' : 'ipv4');
  return blocks;
}

/** Addresses a fetch must never reach (DESIGN §5): private, loopback, link-local (cloud metadata), reserved. */
const BLOCKED = subnets([
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
  ['::', 128],
  ['::1', 128],
  ['64:ff9b::', 96],
  ['100::', 64],
  ['2001:db8::', 32],
  ['fc00::', 7],
  ['fe80::', 10],
  ['ff00::', 8],
]);

/**
 * What `allowPrivate` (local mode) lets through of BLOCKED: loopback and private networks, where a shop
 * serves test files from its own machine or LAN. Never link-local (169.254.169.254 is the cloud
 * metadata service, fe80::/10 its IPv6 kin), multicast or reserved ranges.
 */
const LOCAL_NETWORKS = subnets([
  ['10.0.0.0', 8],
  ['127.0.0.0', 8],
  ['172.16.0.0', 12],
  ['192.168.0.0', 16],
  ['::1', 128],
  ['fc00::', 7],
]);

/**
 * Whether `list` holds the address (an IPv4-mapped IPv6 address as its IPv4 one); `notIp` for text
 * that is no address.
 */
function listed(list: BlockList, address: string, notIp: boolean): boolean {
  const family = isIP(address);
  if (family === 4) return list.check(address, 'ipv4');
  if (family !== 6) return notIp;
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return list.check(mapped[1]!, 'ipv4');
  return list.check(address, 'ipv6');
}

function isLocalNetwork(address: string): boolean {
  return listed(LOCAL_NETWORKS, address, false);
}

/** True when the address is private, loopback, link-local, metadata or otherwise not public. */
export function isBlockedAddress(address: string): boolean {
  return listed(BLOCKED, address, true);
}

export interface HttpImageFetcherOptions {
  /** Allow loopback and private-network addresses (local mode only; never link-local or metadata). */
  allowPrivate: boolean;
  /** Exact addresses allowed even though they are private (a known internal mirror; tests). */
  allowAddresses?: string[];
  maxRedirects?: number;
}

/**
 * Fetches feed files and product images over HTTP(S) with SSRF protection: every address a host name
 * resolves to is checked at connection time (so DNS rebinding cannot slip through), IP literals before
 * connecting, and each redirect hop again. Bodies are capped in bytes and the whole fetch in time.
 */
export class HttpImageFetcher implements ImageFetcher {
  private readonly lookup: LookupFunction;
  private readonly refused: (address: string) => boolean;

  constructor(private readonly options: HttpImageFetcherOptions) {
    const allowed = new Set(options.allowAddresses ?? []);
    this.refused = (address) =>
      !allowed.has(address) &&
      isBlockedAddress(address) &&
      !(options.allowPrivate && isLocalNetwork(address));
    this.lookup = ((
      hostname: string,
      lookupOptions: { all?: boolean },
      callback: (...args: unknown[]) => void,
    ) => {
      dnsLookup(hostname, { ...lookupOptions, all: true }, (error, addresses: LookupAddress[]) => {
        if (error) return callback(error);
        if (addresses.some((a) => this.refused(a.address))) {
          return callback(new FetchError(`${hostname} resolves to a private or reserved address; refused.`));
        }
        if (lookupOptions.all) return callback(null, addresses);
        const first = addresses[0];
        if (!first) return callback(new FetchError(`${hostname} does not resolve.`));
        return callback(null, first.address, first.family);
      });
    }) as unknown as LookupFunction;
  }

  async fetch(
    url: string,
    limits: FetchLimits,
    options: { signal?: AbortSignal } = {},
  ): Promise<{ bytes: Buffer; contentType: string | undefined; url: string }> {
    const { response, deadline, url: finalUrl } = await this.respond(url, limits, options.signal);
    const bytes = await readCapped(response, limits.maxBytes, deadline, options.signal);
    return { bytes, contentType: response.headers['content-type'], url: finalUrl };
  }

  async open(
    url: string,
    limits: FetchLimits,
    options: { signal?: AbortSignal } = {},
  ): Promise<{ body: AsyncIterable<Buffer>; contentType: string | undefined; url: string }> {
    const { response, deadline, url: finalUrl } = await this.respond(url, limits, options.signal);
    checkDeclaredSize(response, limits.maxBytes);
    return {
      body: streamCapped(response, limits.maxBytes, deadline, options.signal),
      contentType: response.headers['content-type'],
      url: finalUrl,
    };
  }

  /** Connects, following redirects with the address checks on every hop; resolves on a 2xx response. */
  private async respond(
    url: string,
    limits: FetchLimits,
    signal: AbortSignal | undefined,
  ): Promise<{ response: IncomingMessage; deadline: number; url: string }> {
    const deadline = Date.now() + limits.timeoutMs;
    let current: URL;
    try {
      current = new URL(url);
    } catch {
      throw new FetchError('not a URL.');
    }
    for (let hop = 0; hop <= (this.options.maxRedirects ?? 5); hop += 1) {
      if (current.protocol !== 'http:' && current.protocol !== 'https:')
        throw new FetchError('only http and https URLs are fetched.');
      const host = current.hostname.replace(/^\[|\]$/g, '');
      if (isIP(host) && this.refused(host)) {
        throw new FetchError(`${host} is a private or reserved address; refused.`);
      }
      const response = await this.get(current, deadline, signal);
      const status = response.statusCode ?? 0;
      if (status >= 300 && status < 400 && response.headers.location) {
        response.resume();
        current = new URL(response.headers.location, current);
        continue;
      }
      if (status < 200 || status >= 300) {
        response.resume();
        throw new FetchError(`HTTP ${status}.`);
      }
      return { response, deadline, url: current.href };
    }
    throw new FetchError('too many redirects.');
  }

  private get(url: URL, deadline: number, signal: AbortSignal | undefined): Promise<IncomingMessage> {
    const remaining = deadline - Date.now();
    if (remaining <= 0) return Promise.reject(new FetchError('timed out.'));
    if (signal?.aborted) return Promise.reject(new FetchError(STOPPED));
    const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
    return new Promise((resolve, reject) => {
      const request = send(url, {
        method: 'GET',
        lookup: this.lookup,
        headers: { 'user-agent': 'visual-product-search/1 (+feed import)', accept: '*/*' },
        timeout: remaining,
      });
      const timer = setTimeout(() => request.destroy(new FetchError('timed out.')), remaining);
      const stop = () => request.destroy(new FetchError(STOPPED));
      signal?.addEventListener('abort', stop, { once: true });
      request.once('response', (response) => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', stop);
        resolve(response);
      });
      request.once('timeout', () => request.destroy(new FetchError('timed out.')));
      request.once('error', (error) => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', stop);
        reject(
          error instanceof FetchError
            ? error
            : new FetchError(`unreachable (${(error as NodeJS.ErrnoException).code ?? error.message}).`),
        );
      });
      request.end();
    });
  }
}

function checkDeclaredSize(response: IncomingMessage, maxBytes: number): void {
  const declared = Number(response.headers['content-length']);
  if (Number.isFinite(declared) && declared > maxBytes) {
    response.destroy();
    throw new FetchError(`larger than ${maxBytes} bytes.`);
  }
}

/** The body as a stream that fails once it passes the size cap or the deadline, or the signal aborts. */
async function* streamCapped(
  response: IncomingMessage,
  maxBytes: number,
  deadline: number,
  signal: AbortSignal | undefined,
): AsyncGenerator<Buffer> {
  let size = 0;
  const timer = setTimeout(
    () => response.destroy(new FetchError('timed out.')),
    Math.max(0, deadline - Date.now()),
  );
  const stop = () => response.destroy(new FetchError(STOPPED));
  if (signal?.aborted) stop();
  signal?.addEventListener('abort', stop, { once: true });
  try {
    for await (const chunk of response as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > maxBytes) throw new FetchError(`larger than ${maxBytes} bytes.`);
      yield chunk;
    }
    if (!response.complete) throw new FetchError('connection closed early.');
  } catch (error) {
    throw error instanceof FetchError
      ? error
      : new FetchError(`connection failed (${(error as Error).message}).`);
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', stop);
    response.destroy();
  }
}

async function readCapped(
  response: IncomingMessage,
  maxBytes: number,
  deadline: number,
  signal: AbortSignal | undefined,
): Promise<Buffer> {
  checkDeclaredSize(response, maxBytes);
  const chunks: Buffer[] = [];
  for await (const chunk of streamCapped(response, maxBytes, deadline, signal)) chunks.push(chunk);
  return Buffer.concat(chunks);
}
