/**
 * The bits of Unleash's admin API the workbench uses to read and flip flags. Against a server with
 * authentication off no token is needed; otherwise pass an admin token.
 */
import { FLAGS, type FlagKey, type FlagValues } from './registry.js';

export interface UnleashAdminOptions {
  url: string;
  token?: string;
  /** The Unleash environment holding this workbench environment's flags. */
  environment: string;
  project?: string;
}

async function call(
  options: UnleashAdminOptions,
  method: string,
  path: string,
  body?: unknown,
): Promise<Response> {
  const headers: Record<string, string> = { accept: 'application/json' };
  if (options.token) headers.authorization = options.token;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(`${options.url.replace(/\/$/, '')}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok && response.status !== 404 && response.status !== 409) {
    throw new Error(`Unleash ${method} ${path}: ${response.status} ${await response.text()}`);
  }
  return response;
}

interface FeatureView {
  environments?: Array<{ name: string; enabled: boolean; strategies?: unknown[] }>;
}

/** The flags' values in the Unleash environment (a flag Unleash does not have counts as its default). */
export async function readUnleashFlags(options: UnleashAdminOptions): Promise<FlagValues> {
  const project = options.project ?? 'default';
  const values = {} as FlagValues;
  for (const flag of FLAGS) {
    const response = await call(options, 'GET', `/api/admin/projects/${project}/features/${flag.key}`);
    if (response.status === 404) {
      values[flag.key] = flag.default;
      continue;
    }
    const feature = (await response.json()) as FeatureView;
    values[flag.key] =
      feature.environments?.find((e) => e.name === options.environment)?.enabled ?? flag.default;
  }
  return values;
}

/** Turns a flag on or off in the Unleash environment, creating it (with a default strategy) if needed. */
export async function setUnleashFlag(
  options: UnleashAdminOptions,
  flag: FlagKey,
  on: boolean,
): Promise<void> {
  const project = options.project ?? 'default';
  const base = `/api/admin/projects/${project}/features`;
  const existing = await call(options, 'GET', `${base}/${flag}`);
  if (existing.status === 404) {
    const description = FLAGS.find((f) => f.key === flag)!.description;
    await call(options, 'POST', base, { name: flag, type: 'release', description });
  }
  const feature = existing.status === 404 ? undefined : ((await existing.json()) as FeatureView);
  const strategies = feature?.environments?.find((e) => e.name === options.environment)?.strategies ?? [];
  if (strategies.length === 0) {
    await call(options, 'POST', `${base}/${flag}/environments/${options.environment}/strategies`, {
      name: 'default',
      parameters: {},
      constraints: [],
    });
  }
  await call(options, 'POST', `${base}/${flag}/environments/${options.environment}/${on ? 'on' : 'off'}`);
}
