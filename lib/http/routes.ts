/**
 * Every HTTP route of the service, in one table read by both the local server and the CDK stack, so
 * that what runs locally is exactly what is deployed. `entry` is the handler module (relative to the
 * repository root) and `handler` its export; one Lambda function per route.
 */
export type HttpMethod = 'GET' | 'POST' | 'PATCH' | 'DELETE';

export interface Route {
  /** Logical name (CDK construct id, function name suffix). */
  name: string;
  method: HttpMethod;
  /** API Gateway resource path; `{param}` segments become pathParameters. */
  path: string;
  entry: string;
  handler: string;
  /** public: search-id auth in the handler (metered by the gateway's usage plans); admin: operator only. */
  access: 'public' | 'admin';
}

export const ROUTES: readonly Route[] = [
  {
    name: 'SearchImage',
    method: 'POST',
    path: '/api/v1/search/image',
    entry: 'functions/search-image.ts',
    handler: 'handler',
    access: 'public',
  },
  {
    name: 'Detect',
    method: 'POST',
    path: '/api/v1/detect',
    entry: 'functions/detect.ts',
    handler: 'handler',
    access: 'public',
  },
  {
    name: 'Related',
    method: 'POST',
    path: '/api/v1/related',
    entry: 'functions/related.ts',
    handler: 'handler',
    access: 'public',
  },
  {
    name: 'RootSearch',
    method: 'POST',
    path: '/',
    entry: 'functions/root-search.ts',
    handler: 'handler',
    access: 'public',
  },

  {
    name: 'AdminCreateFeed',
    method: 'POST',
    path: '/admin/v1/feeds',
    entry: 'functions/admin/feeds.ts',
    handler: 'createFeed',
    access: 'admin',
  },
  {
    name: 'AdminListFeeds',
    method: 'GET',
    path: '/admin/v1/feeds',
    entry: 'functions/admin/feeds.ts',
    handler: 'listFeeds',
    access: 'admin',
  },
  {
    name: 'AdminGetFeed',
    method: 'GET',
    path: '/admin/v1/feeds/{feedId}',
    entry: 'functions/admin/feeds.ts',
    handler: 'getFeed',
    access: 'admin',
  },
  {
    name: 'AdminUpdateFeed',
    method: 'PATCH',
    path: '/admin/v1/feeds/{feedId}',
    entry: 'functions/admin/feeds.ts',
    handler: 'updateFeed',
    access: 'admin',
  },
  {
    name: 'AdminDeleteFeed',
    method: 'DELETE',
    path: '/admin/v1/feeds/{feedId}',
    entry: 'functions/admin/feeds.ts',
    handler: 'deleteFeed',
    access: 'admin',
  },
  {
    name: 'AdminCreateKey',
    method: 'POST',
    path: '/admin/v1/feeds/{feedId}/keys',
    entry: 'functions/admin/keys.ts',
    handler: 'createKey',
    access: 'admin',
  },
  {
    name: 'AdminListKeys',
    method: 'GET',
    path: '/admin/v1/feeds/{feedId}/keys',
    entry: 'functions/admin/keys.ts',
    handler: 'listKeys',
    access: 'admin',
  },
  {
    name: 'AdminRevokeKey',
    method: 'DELETE',
    path: '/admin/v1/keys/{searchId}',
    entry: 'functions/admin/keys.ts',
    handler: 'revokeKey',
    access: 'admin',
  },
  {
    name: 'AdminGetUsage',
    method: 'GET',
    path: '/admin/v1/feeds/{feedId}/usage',
    entry: 'functions/admin/usage.ts',
    handler: 'getUsage',
    access: 'admin',
  },
  {
    name: 'AdminStartImport',
    method: 'POST',
    path: '/admin/v1/feeds/{feedId}/imports',
    entry: 'functions/admin/imports.ts',
    handler: 'startImport',
    access: 'admin',
  },
  {
    name: 'AdminListImports',
    method: 'GET',
    path: '/admin/v1/feeds/{feedId}/imports',
    entry: 'functions/admin/imports.ts',
    handler: 'listImports',
    access: 'admin',
  },
  {
    name: 'AdminGetImport',
    method: 'GET',
    path: '/admin/v1/feeds/{feedId}/imports/{importId}',
    entry: 'functions/admin/imports.ts',
    handler: 'getImport',
    access: 'admin',
  },
  {
    name: 'AdminListProducts',
    method: 'GET',
    path: '/admin/v1/feeds/{feedId}/products',
    entry: 'functions/admin/products.ts',
    handler: 'listProducts',
    access: 'admin',
  },
];

export interface RouteMatch {
  route: Route;
  pathParameters: Record<string, string>;
}

/**
 * Finds the route for a method and path. `allowed` lists the methods of the path when only the method
 * failed to match (→ 405), empty when no route has that path (→ 404). HEAD is GET without the body
 * (RFC 9110 §9.3.2), as the local pages answer it: it takes the path's GET route, and is allowed with it.
 */
export function matchRoute(method: string, path: string): { match?: RouteMatch; allowed: string[] } {
  const allowed: string[] = [];
  const wanted = method === 'HEAD' ? 'GET' : method;
  for (const route of ROUTES) {
    const pathParameters = matchPath(route.path, path);
    if (!pathParameters) continue;
    if (route.method === wanted) return { match: { route, pathParameters }, allowed };
    allowed.push(route.method);
    if (route.method === 'GET') allowed.push('HEAD');
  }
  return { allowed };
}

function matchPath(pattern: string, path: string): Record<string, string> | undefined {
  const want = pattern.split('/').filter(Boolean);
  const got = path.split('/').filter(Boolean);
  if (want.length !== got.length) return undefined;
  const params: Record<string, string> = {};
  for (let i = 0; i < want.length; i++) {
    const segment = want[i]!;
    const value = got[i]!;
    if (segment.startsWith('{') && segment.endsWith('}')) {
      try {
        params[segment.slice(1, -1)] = decodeURIComponent(value);
      } catch {
        return undefined;
      }
    } else if (segment !== value) {
      return undefined;
    }
  }
  return params;
}
