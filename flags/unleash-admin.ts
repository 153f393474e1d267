/**
 * The bits of Unleash's admin API the workbench uses to read and flip flags. Against a server with
 * authentication off no token is needed; otherwise pass an admin token.
 *
 * Every answer that is not 2xx is a failure, named with the call, the status and Unleash's message: a
 * wrong base URL answers 404 everywhere, and must never pass for "flag not defined yet". The URL may be
 * the server root or the API root (`…/api`).
 */
import { FLAGS, type FlagKey, type FlagValues } from './registry.js';
import { unleashApiRoot } from './unleash-url.js';

export interface UnleashAdminOptions {
  url: string;
  token?: string;
  /** The Unleash environment holding this workbench environment's flags (`development` or `production`). */
  environment: string;
  project?: string;
}

/** Unleash answered, but not with a 2xx (or with a body that is not what the call returns). */
export class UnleashAdminError extends Error {
  constructor(
    message: string,
    readonly status: number | undefined,
  ) {
    super(message);
  }
}

const TIMEOUT_MS = 10_000;

async function call<T>(
  options: UnleashAdminOptions,
  method: string,
  path: string,
  body?: unknown,
): Promise<T> {
  const url = `${unleashApiRoot(options.url)}${path}`;
  const headers: Record<string, string> = { accept: 'application/json' };
  if (options.token) headers.authorization = options.token;
  if (body !== undefined) headers['content-type'] = 'application/json';
  let response: Response;
  try {
    response = await fetch(url, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(TIMEOUT_MS),
    });
  } catch (error) {
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    throw new UnleashAdminError(
      `Unleash unreachable: ${method} ${url}: ${cause?.code ?? cause?.message ?? (error as Error).message}`,
      undefined,
    );
  }
  const text = await response.text();
  if (!response.ok) {
    const hint =
      response.status === 401 || response.status === 403
        ? ` (the token is ${options.token ? 'not valid, or not an admin token' : "missing: set UNLEASH_ADMIN_TOKEN or the environment file's flags.tokenEnv"})`
        : '';
    throw new UnleashAdminError(
      `Unleash answered ${response.status} to ${method} ${url}${hint}: ${unleashMessage(text)}`,
      response.status,
    );
  }
  if (!text) return undefined as T;
  try {
    return JSON.parse(text) as T;
  } catch {
    throw new UnleashAdminError(
      `Unleash's answer to ${method} ${url} is not JSON (is the URL the Unleash server?): ${text.slice(0, 120)}`,
      response.status,
    );
  }
}

function unleashMessage(text: string): string {
  try {
    const message = (JSON.parse(text) as { message?: unknown }).message;
    if (typeof message === 'string') return message;
  } catch {
    // not JSON: show the start of it
  }
  return text.slice(0, 200);
}

interface FeatureListView {
  features?: Array<{ name: string; environments?: Array<{ name: string; enabled: boolean }> }>;
}
interface FeatureView {
  environments?: Array<{
    name: string;
    enabled: boolean;
    strategies?: Strategy[];
  }>;
}

/** A strategy as the admin API shows it; its variants say a flag's mode to the nodes that match it. */
interface Strategy {
  id: string;
  name: string;
  parameters?: Record<string, unknown>;
  constraints?: unknown[];
  segments?: number[];
  variants?: Array<{ name: string }>;
}

/**
 * The variant that makes an enabled flag "shadow" for the nodes (docs/flags.md § Shadow): a strategy
 * variant (Unleash 5+ deprecates environment variants; 8 refuses them).
 */
const SHADOW_VARIANT = { name: 'shadow', weight: 1000, weightType: 'variable', stickiness: 'default' };

/**
 * Unleash's environments; throws, naming them, unless `options.environment` is one. OSS Unleash has
 * only `development` and `production`: a deployment environment maps onto one of them, it is not one.
 */
export async function checkUnleashEnvironment(options: UnleashAdminOptions): Promise<string[]> {
  const answer = await call<{ environments?: Array<{ name: string; enabled?: boolean }> }>(
    options,
    'GET',
    '/admin/environments',
  );
  if (!Array.isArray(answer?.environments))
    throw new UnleashAdminError(`Unleash's environment list has no "environments" array`, 200);
  const names = answer.environments.filter((e) => e.enabled !== false).map((e) => e.name);
  if (!names.includes(options.environment))
    throw new UnknownUnleashEnvironmentError(
      `Unleash has no environment "${options.environment}" (it has ${names.join(', ')}): a deployment environment maps onto one of them (docs/flags.md)`,
    );
  return names;
}

export class UnknownUnleashEnvironmentError extends Error {}

/** The flags' values in the Unleash environment (a flag Unleash does not define counts as its default). */
export async function readUnleashFlags(options: UnleashAdminOptions): Promise<FlagValues> {
  const project = options.project ?? 'default';
  // A missing environment would read as "every flag off" when no flag is defined yet: say so instead.
  await checkUnleashEnvironment(options);
  const list = await call<FeatureListView>(options, 'GET', `/admin/projects/${project}/features`);
  if (!Array.isArray(list?.features))
    throw new UnleashAdminError(`Unleash's feature list of project ${project} has no "features" array`, 200);
  const values = {} as FlagValues;
  for (const flag of FLAGS) {
    const feature = list.features.find((f) => f.name === flag.key);
    if (!feature) {
      values[flag.key] = flag.default;
      continue;
    }
    const environment = feature.environments?.find((e) => e.name === options.environment);
    if (!environment)
      throw new UnknownUnleashEnvironmentError(
        `flag ${flag.key} has no environment "${options.environment}" in Unleash (it has ${(feature.environments ?? []).map((e) => e.name).join(', ')})`,
      );
    values[flag.key] = environment.enabled;
  }
  // A flag at shadow is enabled in Unleash but serves as off (its variant says so).
  for (const key of await shadowOf(options, list)) values[key] = false;
  return values;
}

/**
 * The flags at "shadow" in the Unleash environment: enabled, with every environment variant named
 * `shadow` (readUnleashFlags reads them as off: what serves).
 */
export async function readUnleashShadow(options: UnleashAdminOptions): Promise<FlagKey[]> {
  const project = options.project ?? 'default';
  return shadowOf(
    options,
    await call<FeatureListView>(options, 'GET', `/admin/projects/${project}/features`),
  );
}

/** Of the listed flags, those enabled in the environment with only `shadow` variants (one read each). */
async function shadowOf(options: UnleashAdminOptions, list: FeatureListView | undefined): Promise<FlagKey[]> {
  const base = `/admin/projects/${options.project ?? 'default'}/features`;
  const shadow: FlagKey[] = [];
  for (const flag of FLAGS) {
    const listed = list?.features?.find((f) => f.name === flag.key);
    if (!listed?.environments?.find((e) => e.name === options.environment)?.enabled) continue;
    const feature = await call<FeatureView>(options, 'GET', `${base}/${flag.key}`);
    const strategies = feature?.environments?.find((e) => e.name === options.environment)?.strategies ?? [];
    // Shadow for every node: each strategy's variants are `shadow` only.
    const variants = strategies.map((strategy) => strategy.variants ?? []);
    if (
      strategies.length > 0 &&
      variants.every((list) => list.length > 0 && list.every((v) => v.name === SHADOW_VARIANT.name))
    )
      shadow.push(flag.key);
  }
  return shadow;
}

/**
 * Turns a flag on or off in the Unleash environment, or with `shadow` to shadow (enabled, each strategy
 * with the one variant `shadow`), creating it (with a default strategy) if needed. On and off remove the
 * `shadow` variants, so that the flag reads back as written.
 */
export async function setUnleashFlag(
  options: UnleashAdminOptions,
  flag: FlagKey,
  on: boolean,
  shadow = false,
): Promise<void> {
  const project = options.project ?? 'default';
  const base = `/admin/projects/${project}/features`;
  await checkUnleashEnvironment(options); // before creating anything
  const list = await call<FeatureListView>(options, 'GET', base);
  if (!list?.features?.some((f) => f.name === flag)) {
    const description = FLAGS.find((f) => f.key === flag)!.description;
    await call(options, 'POST', base, { name: flag, type: 'release', description });
  }
  const feature = await call<FeatureView>(options, 'GET', `${base}/${flag}`);
  const environment = feature?.environments?.find((e) => e.name === options.environment);
  if (!environment)
    throw new UnknownUnleashEnvironmentError(
      `Unleash has no environment "${options.environment}" for flag ${flag} (it has ${(feature?.environments ?? []).map((e) => e.name).join(', ')})`,
    );
  const strategiesPath = `${base}/${flag}/environments/${options.environment}/strategies`;
  // Without a strategy, an enabled flag is off for every node: give it the default (on for everyone).
  let strategies = environment.strategies ?? [];
  if (strategies.length === 0) {
    const made = await call<Strategy>(options, 'POST', strategiesPath, {
      name: 'default',
      parameters: {},
      constraints: [],
      ...(shadow ? { variants: [SHADOW_VARIANT] } : {}),
    });
    strategies = shadow ? [] : [made];
  }
  for (const strategy of strategies) {
    const hasShadow = (strategy.variants ?? []).some((v) => v.name === SHADOW_VARIANT.name);
    if (!shadow && !hasShadow) continue;
    await call(options, 'PUT', `${strategiesPath}/${strategy.id}`, {
      name: strategy.name,
      parameters: strategy.parameters ?? {},
      constraints: strategy.constraints ?? [],
      ...(strategy.segments ? { segments: strategy.segments } : {}),
      variants: shadow
        ? [SHADOW_VARIANT]
        : (strategy.variants ?? []).filter((v) => v.name !== SHADOW_VARIANT.name),
    });
  }
  await call(
    options,
    'POST',
    `${base}/${flag}/environments/${options.environment}/${on || shadow ? 'on' : 'off'}`,
  );
}
