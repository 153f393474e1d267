export { freePort } from '../../cli/chaos/services.js';
