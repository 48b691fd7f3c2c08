/**
 * A domain entry is a lower-case hostname, optionally prefixed by `*.` to allow every subdomain. In a
 * module of its own, without imports, so that the dashboard's browser bundle checks entries by the same
 * rule as the server (dashboard/src/feed-views.ts).
 */
export const DOMAIN_PATTERN =
  /^(\*\.)?(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/;
