import type { Context } from 'aws-lambda';
import type { Feed } from '#lib/domain/feeds.ts';
import type { SearchKey } from '#lib/domain/keys.ts';
import type { Logger } from '#lib/log.ts';
import type { Endpoint, RateLimitDecision, UsageContext } from '#lib/ports.ts';

/** What the middleware learns about a request, handed to the handler and to the final response step. */
export interface RequestState {
  requestId: string;
  startedAt: number;
  logger: Logger;
  endpoint?: Endpoint;
  /** Set once the search id resolved to a live key and feed. */
  auth?: { key: SearchKey; feed: Feed };
  rateLimit?: RateLimitDecision;
  /** The request's context, metered with it (set by a handler once its body is valid). */
  usageContext?: UsageContext;
}

export type AppContext = Context & { state: RequestState };
