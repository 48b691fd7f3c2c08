import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { matchRoute, ROUTES } from '#lib/http/routes.ts';

describe('route table', () => {
  it('matches static and parameterised paths', () => {
    expect(matchRoute('POST', '/api/v1/search/image').match?.route.name).toBe('SearchImage');
    expect(matchRoute('POST', '/').match?.route.name).toBe('RootSearch');
    const feed = matchRoute('GET', '/admin/v1/feeds/shop%2D1');
    expect(feed.match?.route.name).toBe('AdminGetFeed');
    expect(feed.match?.pathParameters).toEqual({ feedId: 'shop-1' });
  });

  it('tells 405 from 404', () => {
    expect(matchRoute('GET', '/api/v1/detect')).toEqual({ allowed: ['POST'] });
    expect(matchRoute('GET', '/nowhere')).toEqual({ allowed: [] });
  });

  it('takes HEAD to the GET route of a path, and only to one', () => {
    const feed = matchRoute('HEAD', '/admin/v1/feeds/shop-1');
    expect(feed.match?.route.name).toBe('AdminGetFeed');
    expect(feed.match?.pathParameters).toEqual({ feedId: 'shop-1' });
    expect(matchRoute('HEAD', '/admin/v1/feeds').match?.route.method).toBe('GET');
    // A path without GET has no HEAD either; where GET is allowed, so is HEAD.
    expect(matchRoute('HEAD', '/api/v1/detect')).toEqual({ allowed: ['POST'] });
    expect(matchRoute('DELETE', '/admin/v1/feeds').allowed).toEqual(['POST', 'GET', 'HEAD']);
  });

  it('has unique names and unique method+path pairs', () => {
    expect(new Set(ROUTES.map((r) => r.name)).size).toBe(ROUTES.length);
    expect(new Set(ROUTES.map((r) => `${r.method} ${r.path}`)).size).toBe(ROUTES.length);
  });

  it('points every route at an existing module that exports its handler', async () => {
    for (const route of ROUTES) {
      expect(existsSync(route.entry), route.entry).toBe(true);
      const module = (await import(pathToFileURL(resolve(route.entry)).href)) as Record<string, unknown>;
      expect(typeof module[route.handler], `${route.entry}#${route.handler}`).toBe('function');
    }
  });

  it('serves the four public endpoints of the interface', () => {
    const publicRoutes = ROUTES.filter((r) => r.access === 'public').map((r) => `${r.method} ${r.path}`);
    expect(publicRoutes.sort()).toEqual([
      'POST /',
      'POST /api/v1/detect',
      'POST /api/v1/related',
      'POST /api/v1/search/image',
    ]);
  });
});
