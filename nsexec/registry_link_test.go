package nsexec

// The image-rooted tests import the env image with image.Import, whose
// implementation image/registry registers when linked.
import _ "github.com/stratafs/strata/image/registry"
