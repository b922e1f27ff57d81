//! `delete NAME [--wait [--timeout]]`. The operator's finalizer keeps the preview until its
//! namespace is gone, so without `--wait` the preview may still be listed for a while, being
//! deleted; `--wait` returns once it is gone.

use crate::cli::DeleteArgs;
use crate::client::{Previews, Target};
use crate::cmd::wait;
use crate::error::Result;
use crate::preview::{self, resource_name};
use kube::api::DeleteParams;

pub async fn run(t: &Target, args: DeleteArgs) -> Result<()> {
    let name = &args.name;
    let gone = match t.previews().delete(name, &DeleteParams::default()).await {
        Ok(either) => either.is_right(),
        Err(e) => return Err(preview::request_error(t, name, "deleting", e)),
    };
    if args.wait.wait && !gone {
        wait::deleted(t, name, args.wait.timeout).await?;
        outln!("{} deleted", resource_name(name));
    } else if gone {
        outln!("{} deleted", resource_name(name));
    } else {
        outln!(
            "{} marked for deletion (its namespace is deleted first; `vesperctl wait {name} --for deleted` waits until it is gone)",
            resource_name(name)
        );
    }
    Ok(())
}
